"""vLLM-S, a baseline of infinite-llm 7.1: one instance holding every GPU of the cluster, TP inside a node, PP
across nodes. Pooling is off (there is only one instance). The paper adds pipeline parallelism to vLLM for the
cross-node part; here tp = min(GPUs, GPUs per node) and pp = GPUs / tp."""
from dataclasses import replace

from reference_impl.calibration.specs import gpu_entry
from reference_impl.errors import InputError
from reference_impl.sim.config import SimConfig
from reference_impl.systems.design import Design


def single_instance_parallelism(num_gpus: int, gpus_per_node: int) -> tuple[int, int]:
    tp = min(num_gpus, gpus_per_node)
    if num_gpus % tp:
        raise InputError(f"{num_gpus} GPUs do not split into whole nodes of {gpus_per_node}")
    return tp, num_gpus // tp


def vllm_s(config: SimConfig) -> SimConfig:
    """One instance with all of `config`'s GPUs."""
    tp, pp = single_instance_parallelism(config.num_gpus, gpu_entry(config.gpu)["gpus_per_node"])
    return replace(config, tp=tp, pp=pp, engine=replace(config.engine, num_instances=1, pooling=False))


DESIGN = Design("vllm-s", "one vLLM instance of every GPU (TP in a node, PP across nodes)", configure=vllm_s)
