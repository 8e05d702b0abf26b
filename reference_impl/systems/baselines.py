"""The papers' baselines (infinite-llm 7.1) as policies over one cluster config, for the registry in systems.py.

vLLM-M: the same instances as Infinite-LLM with KV pooling off. Each request's KV stays on the instance it was
dispatched to (most free memory, as Infinite-LLM); a request whose context cannot fit one instance is rejected,
as in the paper; one that outgrows the free space of its instance preempts the newest running request
(recompute), as vLLM does.

vLLM-S: one instance holding every GPU of the cluster, TP inside a node, PP across nodes. Pooling is off (there
is only one instance). The paper adds pipeline parallelism to vLLM for the cross-node part; here
tp = min(GPUs, GPUs per node) and pp = GPUs / tp.
"""
from dataclasses import replace

from reference_impl.calibration.specs import gpu_entry
from reference_impl.errors import InputError
from reference_impl.sim.config import SimConfig


def vllm_m(config: SimConfig) -> SimConfig:
    return replace(config, engine=replace(config.engine, pooling=False))


def single_instance_parallelism(num_gpus: int, gpus_per_node: int) -> tuple[int, int]:
    tp = min(num_gpus, gpus_per_node)
    if num_gpus % tp:
        raise InputError(f"{num_gpus} GPUs do not split into whole nodes of {gpus_per_node}")
    return tp, num_gpus // tp


def vllm_s(config: SimConfig) -> SimConfig:
    """One instance with all of `config`'s GPUs."""
    tp, pp = single_instance_parallelism(config.num_gpus, gpu_entry(config.gpu)["gpus_per_node"])
    return replace(config, tp=tp, pp=pp, engine=replace(config.engine, num_instances=1, pooling=False))
