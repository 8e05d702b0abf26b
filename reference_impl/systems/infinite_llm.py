"""Infinite-LLM (infinite-llm 4-5): instances of `registry.instance_tp` GPUs pooling their KV through the
gManager; the default policy and backend (sim/policy.py, sim/backend.py) are its mechanism."""
from reference_impl.systems.design import Design

DESIGN = Design("infinite-llm", "KV pooled across instances by the gManager (DistAttention for remote KV)",
                configure=lambda config: config)
