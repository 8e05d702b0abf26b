"""Where a workload's lengths come from (no heavy imports: the CLI reads this at `--help`)."""
from dataclasses import dataclass

SOURCES = ("auto", "fitted")  # auto: real data where it can be had (file, hub, package), else fitted


@dataclass(frozen=True, slots=True)
class SourceOptions:
    source: str = "auto"
    sharegpt_file: str | None = None  # local ShareGPT conversations for traces 0-2
    leval_file: str | None = None  # local L-Eval records for trace 3
    tokenizer_path: str | None = None  # a local tokenizer.json; else a chars-per-token estimate
