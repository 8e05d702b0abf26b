"""What a simulated run measures: one record per request, the token timeline, and summary numbers."""
from dataclasses import dataclass, field

import numpy as np

FINISHED = "finished"
REJECTED = "rejected"  # does not fit (vLLM-M: its instance; any system: the cluster)
UNFINISHED = "unfinished"  # still queued when the run stopped (stall or time limit)


@dataclass(slots=True)
class RequestMetrics:
    req_id: int
    arrival_s: float
    prompt_len: int
    output_len: int
    inst_id: int = -1
    status: str = UNFINISHED
    first_token_s: float | None = None
    finish_s: float | None = None
    num_preemptions: int = 0
    max_creditors: int = 0  # most instances other than home that held its KV at once (sampled per step)

    @property
    def latency_s(self) -> float | None:
        return None if self.finish_s is None else self.finish_s - self.arrival_s


@dataclass(slots=True)
class SimResult:
    requests: list[RequestMetrics]
    step_end_s: list[float] = field(default_factory=list)  # per decode/prefill step, in event order
    step_tokens: list[int] = field(default_factory=list)  # generated tokens of that step
    step_inst: list[int] = field(default_factory=list)
    num_steps: int = 0
    num_gmanager_rounds: int = 0
    num_moved_blocks: int = 0
    end_s: float = 0.0

    @property
    def finished(self) -> list[RequestMetrics]:
        return [r for r in self.requests if r.status == FINISHED]

    def count(self, status: str) -> int:
        return sum(r.status == status for r in self.requests)

    def summary(self) -> "Summary":
        return summarize(self)

    def throughput_over_time(self, bin_s: float, inst_ids=None) -> tuple[np.ndarray, np.ndarray]:
        """(bin start times [n], generated tokens per second in each bin [n]), optionally of some instances."""
        ends = np.asarray(self.step_end_s)
        tokens = np.asarray(self.step_tokens, dtype=float)
        if inst_ids is not None:
            keep = np.isin(np.asarray(self.step_inst), list(inst_ids))
            ends, tokens = ends[keep], tokens[keep]
        n = max(1, int(np.ceil(self.end_s / bin_s)))
        per_bin = np.bincount(np.minimum((ends / bin_s).astype(int), n - 1), weights=tokens, minlength=n)
        return np.arange(n) * bin_s, per_bin / bin_s


@dataclass(frozen=True, slots=True)
class Summary:
    num_requests: int
    num_finished: int
    num_rejected: int
    num_unfinished: int
    output_tok_s: float  # generated tokens of finished requests / (last finish - first arrival): vLLM benchmarks'
    window_tok_s: float  # tokens generated while requests arrive (first to last arrival) / that span
    total_tok_s: float  # (prompt + generated) tokens of finished requests / (last finish - first arrival)
    mean_latency_s: float | None
    mean_norm_latency_s: float | None  # mean over requests of latency / output tokens (vLLM's metric)
    p99_latency_s: float | None
    mean_ttft_s: float | None
    makespan_s: float

    @property
    def completion_tok_s(self) -> float:
        """Earlier name of output_tok_s (vLLM benchmarks' definition)."""
        return self.output_tok_s


def summarize(result: SimResult) -> Summary:
    done = result.finished
    n = len(result.requests)
    if not done:
        return Summary(n, 0, result.count(REJECTED), result.count(UNFINISHED), 0.0, 0.0, 0.0, None, None, None, None,
                       0.0)
    start = min(r.arrival_s for r in result.requests)
    span = max(r.finish_s for r in done) - start
    window_s = max(r.arrival_s for r in result.requests) - start
    out = sum(r.output_len for r in done)
    lat = np.array([r.latency_s for r in done])
    norm = np.array([r.latency_s / r.output_len for r in done])
    ttft = np.array([r.first_token_s - r.arrival_s for r in done])
    if window_s > 0:
        ends = np.asarray(result.step_end_s)
        in_window = (ends >= start) & (ends <= start + window_s)
        window_tok_s = float(np.asarray(result.step_tokens, dtype=float)[in_window].sum()) / window_s
    else:
        window_tok_s = out / span if span > 0 else 0.0
    return Summary(n, len(done), result.count(REJECTED), result.count(UNFINISHED), out / span if span > 0 else 0.0,
                   window_tok_s,
                   (out + sum(r.prompt_len for r in done)) / span if span > 0 else 0.0,
                   float(lat.mean()), float(norm.mean()), float(np.percentile(lat, 99)), float(ttft.mean()),
                   float(span))
