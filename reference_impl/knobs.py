"""The engine knobs that EngineConfig (a real engine) and SimConfig (a simulated cluster) share, checked once."""
from reference_impl.errors import InputError


def check_knobs(config) -> None:
    """Raise InputError for a bad shared knob of `config` (an EngineConfig or a SimConfig)."""
    if config.num_instances < 1:
        raise InputError(f"need at least one instance (got {config.num_instances})")
    if config.block_size < 1 or config.max_batch_size < 1 or config.move_chunk_tokens < 1:
        raise InputError("block size, batch size and move chunk must be >= 1")
    if config.chunked_prefill_tokens is not None and config.chunked_prefill_tokens < config.block_size:
        raise InputError(f"chunked prefill needs at least one block of tokens per step ({config.block_size})")
