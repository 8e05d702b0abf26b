"""Llumnix's knobs, each from Llumnix's own defaults (AlibabaPAI/llumnix, docs/Arguments.md and
llumnix/config/default.py; the first release's llumnix/arg_utils.py where it differs). Llumnix counts KV in vLLM
blocks of 16 tokens; the thresholds below are those block counts in tokens, so they hold for any rBlock size."""
from dataclasses import dataclass

from reference_impl.errors import InputError

VLLM_BLOCK_TOKENS = 16  # vLLM's default block size, the unit of Llumnix's block-count arguments
REQUEST_POLICIES = ("SR", "LCR", "LR")  # shortest running, last come running, longest running


@dataclass(frozen=True, slots=True)
class LlumnixKnobs:
    # --enable-migration (off in Llumnix's arguments, on here: this design is Llumnix with migration; off, it is
    # its dispatch alone, the "dispatch-only instances" Llumnix is compared against)
    enable_migration: bool = True
    # --polling-interval 0.05 s (instance info and pairing) x --pair-migration-frequency 1 (pair every poll)
    pairing_period_s: float = 0.05
    # --migrate-out-threshold -3.0 on the remaining_steps load (free blocks per request, the paper's freeness):
    # an instance at or below it migrates out, one above it may take requests in (-3 blocks of 16 tokens)
    migrate_out_freeness_tok: float = -3.0 * VLLM_BLOCK_TOKENS
    # the room an instance keeps free, subtracted from its free blocks in the freeness: vLLM's block-manager
    # watermark (0.01 of the blocks), which Llumnix's num_available_gpu_blocks subtracts
    watermark_frac: float = 0.01
    # --max-migration-concurrency 1 (migrations in or out of one instance at once)
    max_migrations_per_instance: int = 1
    # --request-migration-policy SR: the running request with the fewest tokens (the first release's default was
    # LCFS, the last one to arrive: "LCR" here)
    request_policy: str = "SR"
    # --migration-max-stages 3: a migration whose stages, the last one included, do not end by then is dropped
    max_stages: int = 3
    # --migration-last-stage-max-blocks 16: the last stage (the pause) starts once at most this much is left to copy
    last_stage_max_tokens: int = 16 * VLLM_BLOCK_TOKENS

    def __post_init__(self):
        if not self.pairing_period_s > 0:
            raise InputError(f"Llumnix's pairing period must be > 0 s (got {self.pairing_period_s})")
        if self.max_migrations_per_instance < 1 or self.max_stages < 1 or self.last_stage_max_tokens < 0:
            raise InputError("Llumnix needs at least one migration per instance and one stage, and a last stage "
                             "of >= 0 tokens")
        if self.request_policy not in REQUEST_POLICIES:
            raise InputError(f"unknown Llumnix request migration policy {self.request_policy!r}: choose one of "
                             f"{', '.join(REQUEST_POLICIES)}")
        if not 0 <= self.watermark_frac < 1:
            raise InputError(f"Llumnix's watermark must be in [0, 1) (got {self.watermark_frac})")
