"""The speed guard's measurement and baseline: a case's subject and reference run interleaved, round by round,
timed in this process's CPU time (steadier than wall time on a shared machine). Each round's ratio, reference
time / subject time, compares two runs made moments apart; their median is compared with the committed baseline
(repro/data/speed_baseline.json). It fails when the subject got slower than the baseline allows, relative to a
reference measured in the same run.

    meter = RatioMeter.for_case(case, "ci")
    benchmark.pedantic(meter.target, setup=meter.setup, rounds=meter.num_rounds)  # or meter.run_rounds()
    failure = check_ratio(meter.result(), load_baseline())
"""
import json
import os
import platform
import statistics
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from reference_impl.atomic import write_text_atomic
from reference_impl.errors import InputError
from repro.regression.speed_workloads import BY_NAME, CASES, Side, SpeedCase

BASELINE_PATH = Path(__file__).resolve().parents[1] / "data" / "speed_baseline.json"
FORMAT = "infinite-llm-repro/speed-baseline/1"
BLESS_COMMAND = "make bless-speed"  # = repro regression bless-speed
# A ratio may fall to baseline / TOLERANCE before the guard fails: on this project's shared 2-core machine the
# median ratios of repeated runs, at load averages from 5 to 11, stayed within 0.8x-1.3x of each other, and a
# 2x slower subject halves its ratio.
TOLERANCE = 1.6


@dataclass(frozen=True, slots=True)
class SpeedResult:
    case: str
    size: str
    num_rounds: int
    subject_s: float  # median round, CPU seconds
    reference_s: float
    ratio: float  # median over rounds of reference / subject time: how fast the subject runs relative to it
    subject_per_s: float  # work units per second of the median round (tokens, events, rounds, GB of KV)
    reference_per_s: float
    unit: str


@dataclass(slots=True)
class RatioMeter:
    """Interleaved rounds of a case's two sides; `setup`/`target` fit pytest-benchmark's pedantic (the reference
    round runs, timed here, in the untimed setup, so both sides alternate)."""
    case: SpeedCase
    size: str
    subject: Side
    reference: Side
    subject_s: list = field(default_factory=list)
    reference_s: list = field(default_factory=list)

    @classmethod
    def for_case(cls, case: SpeedCase, size: str) -> "RatioMeter":
        meter = cls(case, size, *case.make(size))
        meter.run_rounds(1)  # warm-up (first calls allocate, import and fill caches), not kept
        meter.subject_s.clear()
        meter.reference_s.clear()
        return meter

    @property
    def num_rounds(self) -> int:
        return self.case.num_rounds

    def setup(self):
        state = self.reference.prepare()
        start = time.process_time()
        self.reference.run(state)
        self.reference_s.append(time.process_time() - start)
        return (self.subject.prepare(),), {}

    def target(self, state) -> None:
        start = time.process_time()
        self.subject.run(state)
        self.subject_s.append(time.process_time() - start)

    def run_rounds(self, num_rounds: int | None = None) -> None:
        """Rounds until `num_rounds` are recorded (default: the case's; pytest-benchmark may have run some)."""
        while len(self.subject_s) < (num_rounds or self.num_rounds):
            args, _ = self.setup()
            self.target(*args)

    def result(self) -> SpeedResult:
        subject_s, reference_s = statistics.median(self.subject_s), statistics.median(self.reference_s)
        ratio = statistics.median(r / s for s, r in zip(self.subject_s, self.reference_s))
        return SpeedResult(self.case.name, self.size, len(self.subject_s), subject_s, reference_s, ratio,
                           self.subject.work / subject_s, self.reference.work / reference_s, self.subject.unit)


@contextmanager
def one_thread():
    """torch on one thread while measuring: the ratio then does not depend on how many cores are free."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def measure(case: SpeedCase, size: str) -> SpeedResult:
    with one_thread():
        meter = RatioMeter.for_case(case, size)
        meter.run_rounds()
    return meter.result()


def load_baseline(path: Path = BASELINE_PATH) -> dict:
    if not path.is_file():
        raise InputError(f"no speed baseline at {path}; make one with `{BLESS_COMMAND}`")
    doc = json.loads(path.read_text())
    if doc.get("format") != FORMAT:
        raise InputError(f"{path} is not a speed baseline ({FORMAT}); re-bless with `{BLESS_COMMAND}`")
    return doc


def check_ratio(result: SpeedResult, baseline: dict) -> str | None:
    """None when `result` holds its baseline; else one message: what got slower, by how much, how to re-bless."""
    entry = baseline["sizes"].get(result.size, {}).get(result.case)
    if entry is None:
        return (f"{result.case} ({result.size}): no baseline ratio; measure one with "
                f"`{BLESS_COMMAND}{'' if result.size == 'ci' else ' SIZE=' + result.size}`")
    case = BY_NAME[result.case]
    tolerance = case.tolerance or baseline["tolerance"]
    if result.ratio >= entry["ratio"] / tolerance:
        return None
    return (f"{result.case} ({result.size}): {case.subject} ran at {result.ratio:.3g}x the speed of {case.reference} "
            f"in this run; the baseline is {entry['ratio']:.3g}x and the guard fails below baseline / {tolerance:g} "
            f"= {entry['ratio'] / tolerance:.3g}x: {entry['ratio'] / result.ratio:.2f}x slower than at the baseline "
            f"(median of {result.num_rounds} rounds: {result.subject_s * 1e3:.3g} ms vs {result.reference_s * 1e3:.3g} "
            f"ms CPU). If intended, or on another machine: re-bless with `{BLESS_COMMAND}` and commit "
            f"{BASELINE_PATH.name}.")


def bless(results: list[SpeedResult], path: Path = BASELINE_PATH) -> Path:
    """Write the baseline ratios of `results`; sizes and cases not measured keep their entries."""
    doc = load_baseline(path) if path.is_file() else {"sizes": {}}
    sizes = doc["sizes"]
    for r in results:
        sizes.setdefault(r.size, {})[r.case] = {k: v for k, v in asdict(r).items() if k not in ("case", "size")}
    doc = {"format": FORMAT, "tolerance": TOLERANCE, "bless": BLESS_COMMAND,
           "machine": f"{os.cpu_count()} cores, {platform.machine()}, Python {platform.python_version()}",
           "sizes": {s: {c.name: sizes[s][c.name] for c in CASES if c.name in sizes[s]} for s in sorted(sizes)}}
    return write_text_atomic(path, json.dumps(doc, indent=1) + "\n", make_dirs=False)
