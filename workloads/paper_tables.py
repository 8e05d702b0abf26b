"""Workload tables of the papers, copied here so the project never reads shared data at run time.

Source: data/paper/claims.json of the project brief, keys "traces" (infinite-llm.txt Table 1: ranges,
averages and SDs of context lengths, in tokens; "60k" printed = 60000) and "datasets" (distkv-llm.txt
Table 2: 1000 text-generation tasks per dataset, normal and long ranges per (model, GPUs) row).
"""
from dataclasses import dataclass

TRACES_SOURCE = "infinite-llm Table 1 (claims.json 'traces')"
DATASETS_SOURCE = "distkv-llm Table 2 (claims.json 'datasets')"


@dataclass(frozen=True, slots=True)
class TraceRow:
    trace_id: int
    group: str  # "S": fits one vLLM-M instance; "L": compared against vLLM-S
    min_len: int
    max_len: int
    avg_len: float
    sd_len: float
    origin: str


@dataclass(frozen=True, slots=True)
class DatasetRow:
    dataset_id: int
    model: str
    num_gpus: int
    normal_range: tuple[int, int]
    long_range: tuple[int, int]
    long_ratio: float
    num_requests: int = 1000


TRACES: dict[int, TraceRow] = {
    row[0]: TraceRow(*row)
    for row in [
        (0, "S", 1, 60000, 1233, 7785.68, "ShareGPT4 (GPT-4 conversations)"),
        (1, "S", 1, 60000, 712, 5531.4, "subset of ShareGPT4 with reduced SD"),
        (2, "S", 1, 60000, 469, 3506.36, "subset of ShareGPT4 with reduced SD"),
        (3, "L", 1, 200000, 56362, 28787.78, "L-Eval"),
        (4, "L", 1, 280000, 75650, 39479.42, "distribution of long requests from an online service"),
        (5, "L", 1, 600000, 160239, 87906.67, "distribution of long requests from an online service"),
        (6, "L", 1, 480000, 128804, 70647.93, "distribution of long requests from an online service"),
        (7, "L", 1, 1200000, 293945, 172169.14, "distribution of long requests from an online service"),
        (8, "L", 1, 2000000, 498609, 261817.24, "distribution of long requests from an online service"),
    ]
}

_LONG_RATIOS = (0.01, 0.10, 0.30)
# (model, GPUs, dataset ids for long ratio 1 / 10 / 30 %, normal range, long range)
_TABLE2_ROWS = [
    ("LLaMA2-7B", 2, (1, 7, 13), (1, 100000), (100000, 200000)),
    ("LLaMA2-13B", 4, (2, 8, 14), (1, 140000), (140000, 280000)),
    ("LLaMA2-70B", 8, (3, 9, 15), (1, 300000), (300000, 600000)),
    ("LLaMA2-13B", 8, (4, 10, 16), (1, 240000), (240000, 480000)),
    ("LLaMA2-7B", 16, (5, 11, 17), (1, 600000), (600000, 1200000)),
    ("LLaMA2-7B", 32, (6, 12, 18), (1, 950000), (950000, 1900000)),
]

DATASETS: dict[int, DatasetRow] = dict(
    sorted(
        (dataset_id, DatasetRow(dataset_id, model, gpus, normal, long, ratio))
        for model, gpus, ids, normal, long in _TABLE2_ROWS
        for dataset_id, ratio in zip(ids, _LONG_RATIOS)
    )
)
