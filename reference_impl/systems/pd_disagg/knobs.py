"""The design's knobs (SimConfig.design_knobs) and the workload shape its split search reads."""
import math
from dataclasses import dataclass, replace

from reference_impl.errors import InputError

# A split need not hold the longest requests whole: DistServe's SLO attainment targets are 90-99% (its
# evaluation/ae-scripts/e2e/_plot.py), so the longest 1% may be rejected where holding them costs throughput
LONG_QUANTILE = 0.99
# DistServe's prefill (context stage) batches waiting prompts first come first served up to a token budget:
# --context-max-tokens-per-batch, 8192 in its evaluation's server (evaluation/2-benchmark-serving/
# 2-start-api-server.py; engine default 4096); a prompt longer than the budget runs alone
PREFILL_BATCH_TOKENS = 8192


@dataclass(frozen=True, slots=True)
class WorkloadShape:
    """What the split search reads of a workload: mean prompt and output lengths (tokens), and a long context (the
    LONG_QUANTILE of the workload's contexts), which the split's instances should hold whole (pooling is off)."""
    mean_prompt_tokens: float
    mean_output_tokens: float
    long_context_tokens: int

    def __post_init__(self):
        if not (self.mean_prompt_tokens >= 1 and self.mean_output_tokens >= 1):
            raise InputError("a workload shape needs mean prompt and output lengths >= 1 token")
        if self.long_context_tokens < 2:
            raise InputError("a context holds at least one prompt and one output token")


def shape_of(requests) -> WorkloadShape:
    """The shape of a request list (objects with prompt_len, output_len)."""
    if not requests:
        raise InputError("no requests to take a workload shape from")
    prompts = [r.prompt_len for r in requests]
    outputs = [r.output_len for r in requests]
    return WorkloadShape(sum(prompts) / len(prompts), sum(outputs) / len(outputs),
                         _quantile([p + o for p, o in zip(prompts, outputs)]))


def _quantile(values: list[int]) -> int:
    """The smallest value at or above which lie at most 1 - LONG_QUANTILE of `values` (nearest rank)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(LONG_QUANTILE * len(ordered)) - 1)]


@dataclass(frozen=True, slots=True)
class PDKnobs:
    """The split of the cluster's GPUs: `num_prefill` prefill instances of `prefill_tp` x `prefill_pp` GPUs, the
    rest decode instances of `decode_tp` x `decode_pp`; a None is chosen by the split search (split.py) for
    `workload` (None: the trace-free default shape of the model, configure.default_shape). configure() returns
    the knobs with every field filled. `prefill_batch_tokens`: a prefill step's prompt-token budget (None: every
    waiting prompt that fits, up to the batch cap)."""
    num_prefill: int | None = None
    prefill_tp: int | None = None
    prefill_pp: int | None = None
    decode_tp: int | None = None
    decode_pp: int | None = None
    workload: WorkloadShape | None = None
    prefill_batch_tokens: int | None = PREFILL_BATCH_TOKENS

    def cluster_gpus(self, config) -> int | None:
        """GPUs of a config this design made (ClusterConfig.num_gpus): both sides' (its tp/pp are the decode side's
        alone); None where the split is not filled in (a config this design did not make: one shape)."""
        if None in (self.num_prefill, self.prefill_tp, self.prefill_pp, self.decode_tp, self.decode_pp):
            return None
        num_decode = config.engine.num_instances - self.num_prefill
        return self.num_prefill * self.prefill_tp * self.prefill_pp + num_decode * self.decode_tp * self.decode_pp


def fitted_to(requests, knobs: PDKnobs | None) -> PDKnobs:
    """`knobs` (None: the defaults) with the split searched for `requests`' shape unless they name a shape (as DistServe
    searches per workload; without one the split reads a trace-free default shape of the model)."""
    knobs = knobs or PDKnobs()
    return knobs if knobs.workload is not None else replace(knobs, workload=shape_of(requests))
