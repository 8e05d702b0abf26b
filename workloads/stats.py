"""Generated length statistics next to the papers' tables."""
from dataclasses import dataclass

import numpy as np

from workloads import datasets, traces
from workloads.generate import SourceOptions, generate, real_source
from workloads.paper_tables import DATASETS, TRACES

AVG_TOLERANCE = 0.05  # relative, the acceptance check
SD_TOLERANCE = 0.15


@dataclass(slots=True)
class TraceStats:
    trace_id: int
    method: str
    num_requests: int
    min_len: int
    max_len: int
    avg_len: float
    sd_len: float
    paper_min_len: int
    paper_max_len: int
    paper_avg_len: float
    paper_sd_len: float
    avg_rel_err: float
    sd_rel_err: float
    is_within_tolerance: bool


@dataclass(slots=True)
class DatasetStats:
    dataset_id: int
    model: str
    num_gpus: int
    num_requests: int
    long_ratio: float
    measured_long_ratio: float
    min_len: int
    max_len: int
    is_within_ranges: bool


def context_lens(requests) -> np.ndarray:
    return np.fromiter((r.prompt_len + r.output_len for r in requests), dtype=np.int64, count=len(requests))


def trace_stats(trace_id: int, num_requests: int, seed: int, options: SourceOptions) -> TraceStats:
    row = TRACES[trace_id]
    ctx = context_lens(generate(trace_id=trace_id, num_requests=num_requests, rate_per_s=1.0, seed=seed,
                                options=options))
    avg, sd = float(ctx.mean()), float(ctx.std())
    avg_err, sd_err = avg / row.avg_len - 1, sd / row.sd_len - 1
    ok = (abs(avg_err) <= AVG_TOLERANCE and abs(sd_err) <= SD_TOLERANCE
          and ctx.min() >= row.min_len and ctx.max() <= row.max_len)
    return TraceStats(trace_id, traces.method(trace_id, real_source(trace_id, options)), num_requests,
                      int(ctx.min()), int(ctx.max()), avg, sd, row.min_len, row.max_len, row.avg_len, row.sd_len,
                      avg_err, sd_err, bool(ok))


def dataset_stats(dataset_id: int, num_requests: int, seed: int) -> DatasetStats:
    row = DATASETS[dataset_id]
    ctx = context_lens(generate(dataset_id=dataset_id, num_requests=num_requests, rate_per_s=1.0, seed=seed))
    is_long = datasets.is_long(dataset_id, ctx)
    normal, long = ctx[~is_long], ctx[is_long]
    ok = bool(((normal >= row.normal_range[0]) & (normal <= row.normal_range[1])).all()
              and ((long >= row.long_range[0]) & (long <= row.long_range[1])).all())
    return DatasetStats(dataset_id, row.model, row.num_gpus, num_requests, row.long_ratio, float(is_long.mean()),
                        int(ctx.min()), int(ctx.max()), ok)
