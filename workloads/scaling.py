"""A trace or dataset at CPU scale: request lengths scaled by a fixed rule, so that what outgrows one instance
does so as in the papers' clusters while a real run stays small enough for a CPU.

The rule: the length (prompt + output) at quantile `quantile` of the source's distribution (taken from a fixed
reference sample of it, not from the run's own sample) becomes one instance's KV capacity, `instance_tokens`;
every length is scaled by that factor and capped (`max_tokens_for`: 1.5 instances; prompt and output in
proportion). So the requests above that quantile outgrow one instance, whatever the number of requests or the
seed of a run.
"""
from functools import lru_cache

import numpy as np

from workloads.generate import generate
from workloads.request import Request
from workloads.sources.options import SourceOptions

REFERENCE_REQUESTS = 20000
REFERENCE_SEED = 0


@lru_cache(maxsize=64)
def quantile_tokens(trace_id: int | None, dataset_id: int | None, quantile: float, source: str = "fitted") -> float:
    """Prompt + output tokens at `quantile` of the source's length distribution (the reference sample)."""
    reference = generate(trace_id=trace_id, dataset_id=dataset_id, num_requests=REFERENCE_REQUESTS, rate_per_s=1.0,
                         seed=REFERENCE_SEED, options=SourceOptions(source=source))
    return float(np.quantile([r.prompt_len + r.output_len for r in reference], quantile))


def scale_factor(*, trace_id: int | None = None, dataset_id: int | None = None, instance_tokens: int,
                 quantile: float, source: str = "fitted") -> float:
    """Tokens of the scaled workload per token of the source: its `quantile` length -> `instance_tokens`."""
    if not 0.0 < quantile < 1.0:
        raise ValueError(f"quantile must be in (0, 1) (got {quantile})")
    return instance_tokens / quantile_tokens(trace_id, dataset_id, quantile, source)


def max_tokens_for(instance_tokens: int) -> int:
    """The cap on a scaled request: 1.5 instances, so a long request outgrows one and still fits two beside
    others."""
    return instance_tokens * 3 // 2


def _scaled(r: Request, factor: float) -> Request:
    return Request(r.req_id, r.arrival_s, max(1, round(r.prompt_len * factor)), max(1, round(r.output_len * factor)),
                   r.source)


def scale_requests(requests: list[Request], factor: float, max_tokens: int) -> list[Request]:
    """Each request's prompt and output times `factor` (at least one token each), the total capped at
    `max_tokens` with prompt and output in proportion."""
    out = []
    for r in requests:
        r = _scaled(r, factor)
        prompt, output = r.prompt_len, r.output_len
        if prompt + output > max_tokens:
            prompt = max(1, min(max_tokens - 1, round(max_tokens * prompt / (prompt + output))))
            r = Request(r.req_id, r.arrival_s, prompt, max_tokens - prompt, r.source)
        out.append(r)
    return out


def scale_to_longest(requests: list[Request], max_tokens: int) -> list[Request]:
    """The single-instance sim-vs-real arm's older rule: lengths scaled so this sample's longest request has
    `max_tokens` (the workload then depends on the sample; the fixed rule above does not)."""
    factor = max_tokens / max(r.prompt_len + r.output_len for r in requests)
    return [_scaled(r, factor) for r in requests]
