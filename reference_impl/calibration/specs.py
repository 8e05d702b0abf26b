"""Model and GPU facts (specs.json, sources named there) and the parallelism checks that use them."""
import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from reference_impl.errors import InputError

SPECS_PATH = Path(__file__).with_name("specs.json")


@dataclass(frozen=True, slots=True)
class ModelSpec:
    name: str
    num_layers: int
    hidden: int
    num_heads: int
    num_kv_heads: int
    intermediate: int = 0
    vocab: int = 0

    @property
    def head_dim(self) -> int:
        return self.hidden // self.num_heads

    def layer_params(self) -> int:
        kv_dim = self.num_kv_heads * self.head_dim
        attn = 2 * self.hidden * self.hidden + 2 * self.hidden * kv_dim  # q, o and k, v
        return attn + 3 * self.hidden * self.intermediate + 2 * self.hidden  # gated MLP, two RMSNorms

    def kv_heads_per_gpu(self, tp: int) -> int:
        """KV heads each TP rank holds; with tp > num_kv_heads (GQA) a head is replicated."""
        return max(1, self.num_kv_heads // tp)

    def check_parallelism(self, tp: int, pp: int) -> None:
        if tp < 1 or pp < 1:
            raise InputError(f"tp and pp must be >= 1 (got tp={tp}, pp={pp})")
        if self.num_heads % tp:
            raise InputError(f"tp={tp} does not divide {self.name}'s {self.num_heads} attention heads")
        if self.num_kv_heads % tp and tp % self.num_kv_heads:
            raise InputError(f"tp={tp} does not divide (nor is a multiple of) {self.name}'s "
                             f"{self.num_kv_heads} KV heads")
        if self.num_layers % pp:
            raise InputError(f"pp={pp} does not divide {self.name}'s {self.num_layers} layers")


@cache
def _specs() -> dict:
    return json.loads(SPECS_PATH.read_text())


def _public(table: dict) -> list[str]:
    return [name for name in table if not name.startswith("_")]


def model_names() -> list[str]:
    return _public(_specs()["models"])


def gpu_names() -> list[str]:
    return _public(_specs()["gpus"])


def model_spec(name: str) -> ModelSpec:
    models = _specs()["models"]
    if name.startswith("_") or name not in models:
        raise InputError(f"unknown model {name!r}: choose one of {', '.join(model_names())}")
    fields = {k: v for k, v in models[name].items() if k in ModelSpec.__slots__}
    return ModelSpec(name=name, **fields)


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
