"""Infinite-LLM's cluster of a number of GPUs (the base every design reshapes), and a design's config of it."""
from dataclasses import replace

from reference_impl.calibration.specs import gpu_entry, model_spec
from reference_impl.control.engine_config import EngineConfig
from reference_impl.errors import InputError
from reference_impl.systems.catalog import design
from reference_impl.sim.config import SIM_ENGINE, SimConfig, engine_costs, perf_model
from reference_impl.calibration.links import DEFAULT_LINK


KV_SHARE_MIN = 0.5  # an instance is "appropriate" when at least this share of its usable memory holds KV


def instance_tp(model: str, gpu: str, *, max_tp: int = 8) -> int:
    """Infinite-LLM's instance parallelism: the smallest TP (1, 2, 4, 8) leaving >= KV_SHARE_MIN of usable
    GPU memory for KV; non-attention layers stay on as few GPUs as serve them well (infinite-llm 7.1)."""
    model_spec(model)
    gpu_entry(gpu)
    unprofiled, is_profiled = None, False
    for tp in (1, 2, 4, 8):
        if tp > max_tp:
            break
        try:
            mem = perf_model(SimConfig(model=model, gpu=gpu, tp=tp)).memory
        except InputError as exc:
            unprofiled = unprofiled or exc
            continue
        if mem.kv_capacity_bytes >= KV_SHARE_MIN * (mem.mem_bytes - mem.reserve_bytes):
            return tp
        is_profiled = True
    if not is_profiled and unprofiled is not None:  # no degree has a profile: report that, not the room for KV
        raise unprofiled
    raise InputError(f"no tensor-parallel degree up to {max_tp} leaves room for KV of {model} on {gpu}")


def cluster(model: str, gpu: str, num_gpus: int, *, engine: EngineConfig = SIM_ENGINE, **kwargs) -> SimConfig:
    """Infinite-LLM's cluster of `num_gpus`: instances of `instance_tp` GPUs each, of `engine`'s knobs otherwise
    (`kwargs`: SimConfig's other fields)."""
    tp = instance_tp(model, gpu)
    if num_gpus % tp:
        raise InputError(f"{num_gpus} GPUs do not split into instances of tp={tp} for {model}")
    return SimConfig(model=model, gpu=gpu, tp=tp, engine=replace(engine, num_instances=num_gpus // tp), **kwargs)


def system_config(system: str, base: SimConfig) -> SimConfig:
    """`base` as the design called `system` runs it (catalog.py)."""
    return design(system).config(base)


def as_simulated(config: SimConfig) -> SimConfig:
    """`config` with the settings its runs never read put back to their defaults, so that two configs which
    simulate the same run compare equal: the pooled engine's own policy and backend (Infinite-LLM, vLLM-M, vLLM-S)
    without pooling send nothing over the link (no remote MicroAttention, no KV moves, no gManager round) and no
    instance calls a peer. A design with a policy or backend of its own may use the link without pooling (a
    migration, a prefill/decode hand-over): its config is kept whole."""
    if config.engine.pooling or not design(config.design).on_pooled_engine:
        return config
    return replace(config, link=DEFAULT_LINK, engine_costs=replace(engine_costs(config), peer_call_s=0.0))
