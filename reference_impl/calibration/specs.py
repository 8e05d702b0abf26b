"""Model and GPU facts (specs.json, sources named there) and the parallelism checks that use them."""
import json
from functools import cache
from pathlib import Path

from reference_impl.errors import InputError
from reference_impl.model.config import ModelConfig

SPECS_PATH = Path(__file__).with_name("specs.json")


@cache
def _specs() -> dict:
    return json.loads(SPECS_PATH.read_text())


def _public(table: dict) -> list[str]:
    return [name for name in table if not name.startswith("_")]


def model_names() -> list[str]:
    return _public(_specs()["models"])


def gpu_names() -> list[str]:
    return _public(_specs()["gpus"])


def model_spec(name: str) -> ModelConfig:
    models = _specs()["models"]
    if name.startswith("_") or name not in models:
        raise InputError(f"unknown model {name!r}: choose one of {', '.join(model_names())}")
    fields = {k: v for k, v in models[name].items() if k in ModelConfig.__slots__}
    return ModelConfig(name=name, **fields)


def attention_shapes() -> dict[str, dict]:
    """The attention shapes of the models in DistServe's profiles, by the profiles' model names."""
    table = _specs()["attention_shapes"]
    return {name: table[name] for name in _public(table)}


def model_entry(name: str) -> dict:
    model_spec(name)
    return _specs()["models"][name]


def gpu_entry(name: str) -> dict:
    gpus = _specs()["gpus"]
    if name.startswith("_") or name not in gpus:
        raise InputError(f"unknown GPU {name!r}: choose one of {', '.join(gpu_names())}")
    return gpus[name]


def reserve_fraction() -> float:
    return float(_specs()["memory"]["reserve_fraction"])
