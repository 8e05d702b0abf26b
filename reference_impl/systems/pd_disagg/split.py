"""The prefill/decode split of a cluster, chosen per workload by the calibrated cost model (DistServe's placement
search, LLMServe/DistServe simdistserve/benchmarks/search_configs.py and simulate.py:find_best_config, with an
estimate from the cost model in place of its simulated bisection of the per-GPU rate).

Every feasible split of all `num_gpus` GPUs into prefill instances of one shape and decode instances of one shape
is estimated; the best is the one with the highest max throughput (requests/s), among those whose instances hold
the workload's long prompt and context (knobs.LONG_QUANTILE; both sides: a preempted request is recomputed on the
prefill pool) when any does:
    prefill pool = instances x prompts/s of one instance, at the mean prompt, in a step of as many prompts as its
                   KV holds, at most the batch cap and the prefill token budget (knobs.PREFILL_BATCH_TOKENS)
    decode pool  = instances x B / step time / mean output, B the largest batch the decode instance's KV holds at
                   the mean decode context (prompt + output/2), at most the batch cap
    max throughput = the smaller of the two (the bottleneck side decides)
Instance shapes: tp in 1, 2, 4, 8 up to a node; pipeline stages (pp > 1) only past a node (tp = GPUs per node);
each shape must be profiled and leave room for KV."""
from dataclasses import dataclass

from reference_impl.calibration.model import CalibratedPerfModel
from reference_impl.calibration.perf_model import InstanceLoad, causal_prefill_pairs, step_time_s
from reference_impl.calibration.specs import gpu_entry
from reference_impl.errors import InputError
from reference_impl.sim.config import SimConfig, perf_model
from reference_impl.systems.pd_disagg.knobs import PDKnobs, WorkloadShape

TP_DEGREES = (1, 2, 4, 8)


@dataclass(frozen=True, slots=True, order=True)
class InstanceShape:
    tp: int
    pp: int = 1

    @property
    def num_gpus(self) -> int:
        return self.tp * self.pp


@dataclass(frozen=True, slots=True)
class Split:
    num_prefill: int
    prefill: InstanceShape
    num_decode: int
    decode: InstanceShape

    @property
    def prefill_gpus(self) -> int:
        return self.num_prefill * self.prefill.num_gpus

    @property
    def decode_gpus(self) -> int:
        return self.num_decode * self.decode.num_gpus

    @property
    def num_gpus(self) -> int:
        return self.prefill_gpus + self.decode_gpus


@dataclass(frozen=True, slots=True)
class SplitEstimate:
    split: Split
    prefill_req_s: float  # the prefill pool's rate
    decode_req_s: float  # the decode pool's rate
    decode_batch: int  # B of one decode instance
    fits: bool  # the workload's long context fits a prefill and a decode instance

    @property
    def max_req_s(self) -> float:
        return min(self.prefill_req_s, self.decode_req_s)

    @property
    def bottleneck(self) -> str:
        return "prefill" if self.prefill_req_s <= self.decode_req_s else "decode"


def instance_model(base: SimConfig, shape: InstanceShape) -> CalibratedPerfModel:
    return perf_model(SimConfig(model=base.model, gpu=base.gpu, tp=shape.tp, pp=shape.pp, link=base.link,
                                coefficients_path=base.coefficients_path))


def instance_shapes(base: SimConfig, max_gpus: int) -> list[InstanceShape]:
    """The instance shapes of at most `max_gpus` GPUs that `base`'s model runs on (profiled, room for KV)."""
    per_node = gpu_entry(base.gpu)["gpus_per_node"] if base.coefficients_path is None else 1
    shapes = []
    for tp in (t for t in TP_DEGREES if t <= per_node):
        for pp in range(1, max_gpus // tp + 1) if tp == per_node else (1,):
            if tp * pp > max_gpus:
                break
            try:
                instance_model(base, InstanceShape(tp, pp))
            except InputError:
                continue
            shapes.append(InstanceShape(tp, pp))
    return shapes


def splits(shapes: list[InstanceShape], num_gpus: int, fixed: PDKnobs = PDKnobs()):
    """Every split of exactly `num_gpus` GPUs into >= 1 prefill and >= 1 decode instance of these shapes that
    agrees with the fields of `fixed` that are set."""
    def agrees(shape, tp, pp):
        return (tp is None or shape.tp == tp) and (pp is None or shape.pp == pp)
    for p in (s for s in shapes if agrees(s, fixed.prefill_tp, fixed.prefill_pp)):
        for d in (s for s in shapes if agrees(s, fixed.decode_tp, fixed.decode_pp)):
            for n_p in range(1, (num_gpus - d.num_gpus) // p.num_gpus + 1):
                rest = num_gpus - n_p * p.num_gpus
                if rest % d.num_gpus == 0 and (fixed.num_prefill is None or n_p == fixed.num_prefill):
                    yield Split(n_p, p, rest // d.num_gpus, d)


def estimate(split: Split, shape: WorkloadShape, prefill_model: CalibratedPerfModel,
             decode_model: CalibratedPerfModel, max_batch_size: int, batch_tokens: int | None) -> SplitEstimate:
    """The split's rates for `shape` (module docstring)."""
    prompt = max(1, round(shape.mean_prompt_tokens))
    prefill_cap = prefill_model.memory.kv_capacity_tokens
    prompts = max(1, min(max_batch_size, prefill_cap // prompt, (batch_tokens or prefill_cap) // prompt))
    prefill_s = step_time_s(prefill_model, InstanceLoad(0, 0, prefill_tokens=prompts * prompt,
                                                        prefill_attn_pairs=prompts * causal_prefill_pairs(prompt)))
    context = max(1, round(shape.mean_prompt_tokens + shape.mean_output_tokens / 2))
    decode_cap = decode_model.memory.kv_capacity_tokens
    batch = min(max_batch_size, decode_cap // context)
    decode_tok_s = batch / step_time_s(decode_model, InstanceLoad(batch, batch * context)) if batch else 0.0
    fits = shape.long_context_tokens <= min(prefill_cap, decode_cap)
    return SplitEstimate(split, split.num_prefill * prompts / prefill_s,
                         split.num_decode * decode_tok_s / shape.mean_output_tokens, batch, fits)


def search_split(base: SimConfig, num_gpus: int, shape: WorkloadShape, fixed: PDKnobs = PDKnobs()) -> SplitEstimate:
    """The best split of `num_gpus` GPUs of `base`'s model and GPU for `shape` (module docstring); the first in
    enumeration order among equals. InputError when no split agrees with `fixed`."""
    best = None
    for est in all_estimates(base, num_gpus, shape, fixed):
        if best is None or (est.fits, est.max_req_s) > (best.fits, best.max_req_s):
            best = est
    if best is None:
        raise InputError(f"no prefill/decode split of {num_gpus} GPUs of {base.model} on {base.gpu} "
                         f"agrees with {fixed}: at least 2 GPUs, and shapes the calibration profiles")
    return best


def all_estimates(base: SimConfig, num_gpus: int, shape: WorkloadShape, fixed: PDKnobs = PDKnobs()):
    """The estimate of every split `search_split` considers, in its order."""
    shapes = instance_shapes(base, num_gpus - 1)
    for split in splits(shapes, num_gpus, fixed):
        yield estimate(split, shape, instance_model(base, split.prefill), instance_model(base, split.decode),
                       base.engine.max_batch_size, fixed.prefill_batch_tokens)
