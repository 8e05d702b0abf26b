"""vLLM-M (infinite-llm 7.1): the same instances as Infinite-LLM with KV pooling off.

Each request's KV stays on the instance it was dispatched to (most free memory, as Infinite-LLM); a request
whose context cannot fit one instance is rejected, as in the paper; one that outgrows the free space of its
instance preempts the newest running request (recompute), as vLLM does.
"""
from dataclasses import replace

from reference_impl.sim.config import SimConfig


def vllm_m(config: SimConfig) -> SimConfig:
    return replace(config, pooling=False)
