"""vLLM-M, a baseline of infinite-llm 7.1: the same instances as Infinite-LLM with KV pooling off. Each request's
KV stays on the instance it was dispatched to (most free memory, as Infinite-LLM); a request whose context cannot
fit one instance is rejected, as in the paper; one that outgrows the free space of its instance preempts the
newest running request (recompute), as vLLM does."""
from dataclasses import replace

from reference_impl.sim.config import SimConfig
from reference_impl.systems.design import Design


def vllm_m(config: SimConfig) -> SimConfig:
    return replace(config, engine=replace(config.engine, pooling=False))


DESIGN = Design("vllm-m", "one vLLM per instance, KV whole on its instance, no pooling", configure=vllm_m)
