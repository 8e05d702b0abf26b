"""Every experiment of `repro run --experiment NAME`, imported only when used."""
import importlib

from reference_impl.errors import InputError

EXPERIMENTS = {
    "attention-micro": "repro.experiments.attention_micro",
    "migration": "repro.experiments.migration",
}


def get_experiment(name: str):
    if name not in EXPERIMENTS:
        known = ", ".join(sorted(EXPERIMENTS)) or "none yet"
        raise InputError(f"unknown experiment {name!r}; choose one of: {known}")
    return importlib.import_module(EXPERIMENTS[name]).EXPERIMENT
