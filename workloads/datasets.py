"""Datasets 1-18 of distkv-llm Table 2: per (model, GPUs) row, normal and long context ranges, with
1 %, 10 % or 30 % long requests. Table 2 gives only ranges and ratios, so (assumptions): lengths are
uniform within each range (a long one strictly above the normal range's end); the long count is ratio * n rounded at random (exactly
10, 100 or 300 of 1000), at random positions; output lengths as for long traces (traces.py)."""
import numpy as np

from workloads import lengths
from workloads.paper_tables import DATASETS
from workloads.traces import LengthBatch


def method(dataset_id: int) -> str:
    row = DATASETS[dataset_id]
    return f"uniform in normal {list(row.normal_range)} / long {list(row.long_range)}, {row.long_ratio:.0%} long"


def sample_dataset(dataset_id: int, n: int, rng: np.random.Generator) -> LengthBatch:
    row = DATASETS[dataset_id]
    num_long = lengths.exact_count(n, row.long_ratio, rng)
    is_long = np.zeros(n, dtype=bool)
    is_long[rng.choice(n, size=num_long, replace=False)] = True
    normal_lo = max(row.normal_range[0], lengths.MIN_CONTEXT_LEN)
    ctx = rng.integers(normal_lo, row.normal_range[1], size=n, endpoint=True)
    # The ranges share their boundary; a long request is strictly above the normal range.
    ctx[is_long] = rng.integers(row.normal_range[1] + 1, row.long_range[1], size=num_long, endpoint=True)
    prompt, output = lengths.split_by_reply(ctx, rng)
    labels = np.where(is_long, f"fitted:dataset-{dataset_id}-long", f"fitted:dataset-{dataset_id}-normal")
    return LengthBatch(prompt, output, labels.tolist())


def is_long(dataset_id: int, context_lens: np.ndarray) -> np.ndarray:
    """Which context lengths [n] fall in the dataset's long range (the shared boundary counts as normal)."""
    return context_lens > DATASETS[dataset_id].normal_range[1]
