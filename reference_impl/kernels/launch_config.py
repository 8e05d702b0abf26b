"""Kernel choice by context length: the papers' normal (<= 8K), long (8K-32K) and ultra (> 32K) classes."""
from dataclasses import dataclass

NORMAL_MAX_TOKENS = 8 * 1024
LONG_MAX_TOKENS = 32 * 1024


@dataclass(frozen=True, slots=True)
class KernelConfig:
    context_class: str
    tile_n: int  # tokens per inner-loop step; >= 16 so every tl.dot dimension is >= 16
    min_tokens_per_split: int  # a split never gets less work than this
    num_warps: int
    num_stages: int


# Tuned on an H100 (bf16, graph-replayed, 1-64 sequences of 8K-128K tokens, MHA 32/32 and GQA 64/8): 4 warps
# beat 8 everywhere (8 warps cost 25% at one 128K MHA sequence), tiles of 32 tokens lost up to 10%.
CONFIGS = {
    "normal": KernelConfig("normal", tile_n=64, min_tokens_per_split=512, num_warps=4, num_stages=3),
    "long": KernelConfig("long", tile_n=64, min_tokens_per_split=1024, num_warps=4, num_stages=3),
    "ultra": KernelConfig("ultra", tile_n=128, min_tokens_per_split=4096, num_warps=4, num_stages=3),
}
PROGRAMS_PER_SM = 8  # enough resident programs to keep HBM busy while each waits on its loads


def context_class(max_tokens: int) -> str:
    if max_tokens <= NORMAL_MAX_TOKENS:
        return "normal"
    return "long" if max_tokens <= LONG_MAX_TOKENS else "ultra"


def plan_splits(max_tokens: int, num_programs_per_split: int, num_sms: int, cfg: KernelConfig) -> int:
    """Tokens per split (a multiple of tile_n): enough splits to give every SM PROGRAMS_PER_SM programs,
    never tiny ones."""
    if max_tokens <= 0:
        return cfg.tile_n
    wanted_splits = max(1, -(-PROGRAMS_PER_SM * num_sms // max(1, num_programs_per_split)))
    tokens = max(cfg.min_tokens_per_split, -(-max_tokens // wanted_splits))
    return -(-tokens // cfg.tile_n) * cfg.tile_n
