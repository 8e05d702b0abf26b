"""The cluster of the design: the base cluster's GPUs split into prefill instances (ids 0 .. P-1) and decode
instances (ids P ..), pooling off. SimConfig has one tp/pp, so it carries the decode instances' (their memory and
step cost are the engine's default); the prefill instances' shape is in the knobs and PDBackend prices them with it.

The workload comes in as the `workload` knob (the experiment fills it from the trace: knobs.shape_of). Without one
the search reads a trace-free default shape of the model: prompt and output of equal mean, each half the context at
which one base instance's KV fills a batch of the cap (capacity / batch cap), i.e. the lengths at which memory and
the batch cap bind together on a decode instance of the base shape."""
from dataclasses import replace

from reference_impl.sim.config import SimConfig, perf_model
from reference_impl.systems.pd_disagg.knobs import PDKnobs, WorkloadShape
from reference_impl.systems.pd_disagg.split import InstanceShape, Split, search_split


def knobs_of(config: SimConfig) -> PDKnobs:
    knobs = config.design_knobs
    return knobs if isinstance(knobs, PDKnobs) else PDKnobs()


def default_shape(base: SimConfig) -> WorkloadShape:
    context = perf_model(base).memory.kv_capacity_tokens // base.engine.max_batch_size
    half = max(1, context // 2)
    return WorkloadShape(half, half, 2 * half)


def split_of(config: SimConfig) -> Split:
    """The split of a config this design made (its knobs, every field filled)."""
    k = knobs_of(config)
    return Split(k.num_prefill, InstanceShape(k.prefill_tp, k.prefill_pp),
                 config.engine.num_instances - k.num_prefill, InstanceShape(k.decode_tp, k.decode_pp))


def pd_disaggregation(base: SimConfig) -> SimConfig:
    """`base`'s GPUs as prefill and decode instances, the split from the knobs or the search."""
    knobs = knobs_of(base)
    shape = knobs.workload or default_shape(base)
    split = search_split(base, base.num_gpus, shape, knobs).split
    knobs = replace(knobs, num_prefill=split.num_prefill, prefill_tp=split.prefill.tp, prefill_pp=split.prefill.pp,
                    decode_tp=split.decode.tp, decode_pp=split.decode.pp, workload=shape)
    engine = replace(base.engine, num_instances=split.num_prefill + split.num_decode, pooling=False)
    return replace(base, tp=split.decode.tp, pp=split.decode.pp, engine=engine, design_knobs=knobs)


def chosen(config: SimConfig, knobs: PDKnobs) -> dict:
    """The split the design chose for `config` and the workload shape it chose it for, in words."""
    s, w = split_of(config), knobs.workload
    return {"split": f"{s.num_prefill}x tp{s.prefill.tp}pp{s.prefill.pp} prefill + "
                     f"{s.num_decode}x tp{s.decode.tp}pp{s.decode.pp} decode",
            "split_for": f"mean prompt {w.mean_prompt_tokens:.0f}, output {w.mean_output_tokens:.0f} tokens, "
                         f"long context {w.long_context_tokens}"}
