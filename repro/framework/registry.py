"""Every experiment of `repro run --experiment NAME`, imported only when used."""
import importlib

from reference_impl.errors import InputError

EXPERIMENTS = {
    "attention-micro": "repro.attention.experiment",
    "migration": "repro.experiments.migration.experiment",
    "kv-move": "repro.experiments.kv_move",
    "remote-vs-local": "repro.experiments.remote_vs_local",
    "motivation": "repro.experiments.motivation",
    "e2e": "repro.experiments.e2e",
    "e2e-datasets": "repro.experiments.e2e_datasets",
    "context-length": "repro.experiments.context_length",
    "perf-model": "repro.experiments.perf_model_exp",
    "dgfm": "repro.experiments.dgfm",
    "lamina": "repro.experiments.lamina",
    "sim-vs-real": "repro.experiments.sim_vs_real.experiment",
    "sensitivity": "repro.experiments.sensitivity.experiment",
    "designs": "repro.experiments.designs.experiment",
    "scale": "repro.experiments.scale.experiment",
}


def get_experiment(name: str):
    if name not in EXPERIMENTS:
        known = ", ".join(sorted(EXPERIMENTS)) or "none yet"
        raise InputError(f"unknown experiment {name!r}; choose one of: {known}")
    return importlib.import_module(EXPERIMENTS[name]).EXPERIMENT
