"""A model's shape (torch-free): the LLaMA-family config the engine builds and the cost model prices, the `tiny`
preset, and the reading of a Hugging Face config.json."""
import json
from dataclasses import dataclass

from reference_impl.errors import InputError


@dataclass(frozen=True, slots=True)
class ModelConfig:
    """One model's shape, read by the engine (model/llama.py) and the cost model (calibration/) alike."""
    name: str = "tiny"
    vocab_size: int = 512
    hidden_size: int = 128
    intermediate_size: int = 344
    num_layers: int = 4
    num_heads: int = 8
    num_kv_heads: int = 2
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    tie_word_embeddings: bool = False
    eos_token_id: int | None = None

    def __post_init__(self):
        counts = ("vocab_size", "hidden_size", "intermediate_size", "num_layers", "num_heads", "num_kv_heads")
        for name in counts:
            if type(getattr(self, name)) is not int or getattr(self, name) < 1:
                raise InputError(f"model {name} must be an integer >= 1, got {getattr(self, name)!r}")
        if self.hidden_size % self.num_heads or self.num_heads % self.num_kv_heads:
            raise InputError(f"unsupported head layout: hidden {self.hidden_size}, {self.num_heads} heads, "
                             f"{self.num_kv_heads} KV heads (need hidden % heads == 0 and heads % kv_heads == 0)")

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    def layer_params(self) -> int:
        kv_dim = self.num_kv_heads * self.head_dim
        attn = 2 * self.hidden_size * self.hidden_size + 2 * self.hidden_size * kv_dim  # q, o and k, v
        return attn + 3 * self.hidden_size * self.intermediate_size + 2 * self.hidden_size  # gated MLP, 2 RMSNorms

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


TINY = ModelConfig()
SUPPORTED_ARCHS = ("LlamaForCausalLM",)


_HF_COUNTS = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads")


def _hf_value(cfg: dict, key: str, kind, default=None):
    """cfg[key] checked to be a positive int (kind int), positive number (float) or bool; one line naming the key."""
    value = cfg.get(key, default)
    if value is None:
        raise InputError(f"config.json lacks {key!r} (a Hugging Face LLaMA config has {', '.join(_HF_COUNTS)})")
    if kind is bool:
        ok = isinstance(value, bool)
    elif kind is int:
        ok = type(value) is int and value > 0
    else:
        ok = type(value) in (int, float) and 0 < value < float("inf")
    if not ok:
        expected = {bool: "true or false", int: "an integer > 0", float: "a number > 0"}[kind]
        raise InputError(f"config.json {key} must be {expected}, got {json.dumps(value)}")
    return value


def config_from_hf(cfg: dict, name: str = "hf") -> ModelConfig:
    """ModelConfig from a Hugging Face config.json dict; InputError on what this model does not implement."""
    if not isinstance(cfg, dict):
        raise InputError(f"config.json must hold a JSON object, got a {type(cfg).__name__}")
    archs = cfg.get("architectures")
    arch = archs[0] if isinstance(archs, list) and archs else "?"
    problems = []
    if cfg.get("model_type") != "llama" or arch not in SUPPORTED_ARCHS:
        problems.append(f"model_type {cfg.get('model_type')!r} / {arch} (only llama / LlamaForCausalLM)")
    if cfg.get("hidden_act", "silu") != "silu":
        problems.append(f"hidden_act {cfg.get('hidden_act')!r}")
    if cfg.get("rope_scaling"):
        problems.append("rope_scaling")
    if cfg.get("attention_bias") or cfg.get("mlp_bias"):
        problems.append("attention/MLP bias")
    if problems:
        raise InputError(f"unsupported model config: {'; '.join(problems)}")
    counts = {key: _hf_value(cfg, key, int) for key in _HF_COUNTS}
    heads = counts["num_attention_heads"]
    kv_heads = _hf_value(cfg, "num_key_value_heads", int, heads)
    if cfg.get("head_dim") not in (None, counts["hidden_size"] // heads):
        raise InputError("unsupported model config: head_dim != hidden_size / num_attention_heads")
    eos = cfg.get("eos_token_id")
    eos = eos[0] if isinstance(eos, list) and eos else eos
    if eos is not None and (type(eos) is not int or eos < 0):
        raise InputError(f"config.json eos_token_id must be a token id (an integer >= 0), got {json.dumps(eos)}")
    return ModelConfig(
        name=name, vocab_size=counts["vocab_size"], hidden_size=counts["hidden_size"],
        intermediate_size=counts["intermediate_size"], num_layers=counts["num_hidden_layers"], num_heads=heads,
        num_kv_heads=kv_heads, rms_norm_eps=_hf_value(cfg, "rms_norm_eps", float, 1e-6),
        rope_theta=_hf_value(cfg, "rope_theta", float, 10000.0),
        tie_word_embeddings=_hf_value(cfg, "tie_word_embeddings", bool, False), eos_token_id=eos)
