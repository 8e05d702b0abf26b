"""What a serving run records and its summary numbers, whatever served it (the simulator, the wall-clock loop of
backends/clock.py, the Ray serving loop, real vLLM): one record per request and the token timeline of the steps.

The one summary of every serving path (the simulator, the Ray serving loop, real vLLM and the local engine in
baselines/): `summarize_records` over request records (arrival_s, prompt_len, output_len, status,
first_token_s, finish_s) and the step timeline (end time and generated tokens of each step).

Steady-state window (what the serving curves and their max throughput use): from the arrival of request
number ceil(WARMUP_FRAC * N) (in arrival order) to the later of the last arrival and the time by which all but
DRAIN_FRAC of the requests have finished. Before it the batch fills from empty (warm-up); after it the last
requests finish alone on an emptying batch (the drain), so the rate falls off. Below saturation the window
ends at the last arrival and the throughput in it equals the offered load; past saturation a queue remains
after the last arrival and the window runs on while it is served at full rate, which is the plateau (and
what a short run of very long requests needs: one prefill can outlast the arrivals).
Throughput over the makespan (`output_tok_s`, vLLM's benchmark definition) is kept beside it.
"""
from dataclasses import asdict, dataclass, field

import numpy as np

FINISHED = "finished"
REJECTED = "rejected"  # does not fit (vLLM-M: its instance; any system: the cluster)
UNFINISHED = "unfinished"  # still queued when the run stopped (stall or time limit)
FAILED = "failed"  # given up by the engine (an instance died and it no longer fits the cluster)


@dataclass(slots=True)
class RequestRecord:
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
class ServingRun:
    requests: list[RequestRecord]
    step_end_s: list[float] = field(default_factory=list)  # per decode/prefill step, in event order
    step_tokens: list[int] = field(default_factory=list)  # generated tokens of that step
    step_inst: list[int] = field(default_factory=list)
    num_steps: int = 0
    num_gmanager_rounds: int = 0
    num_moved_blocks: int = 0
    num_peer_calls: int = 0  # simulated control-plane calls on peers that wait (counted where they cost time)
    num_stalled_instants: int = 0  # an instance stopped at events.MAX_NOOP_STEPS_PER_INSTANT steps that did nothing
    idle_waiting_frac: float = 0.0  # share of instance-time idle while a waiting request fit the free rBlocks
    peak_batch_size: int | None = None  # the largest running batch of any instance (None: not recorded)
    end_s: float = 0.0
    # what a design counts of its own mechanism (sim/policy.py Policy.finish), names with units: e.g. migrations,
    # migration_pause_s, kv_hop_bytes
    design_counters: dict[str, float] = field(default_factory=dict)

    @property
    def finished(self) -> list[RequestRecord]:
        return [r for r in self.requests if r.status == FINISHED]

    def count(self, status: str) -> int:
        return sum(r.status == status for r in self.requests)

    def summary(self) -> "Summary":
        return summarize_records(self.requests, self.step_end_s, self.step_tokens)

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


WARMUP_FRAC = 0.1
DRAIN_FRAC = 0.1


def steady_start_s(sorted_arrivals_s) -> float:
    """Where the steady-state window starts: the arrival of request number ceil(WARMUP_FRAC * N)."""
    n = len(sorted_arrivals_s)
    return float(sorted_arrivals_s[min(n - 1, int(np.ceil(WARMUP_FRAC * n)))])


def drain_rank(num_requests: int) -> int:
    """The window ends (at the latest arrival or later) when this many requests have finished."""
    return int(np.ceil((1 - DRAIN_FRAC) * num_requests))


@dataclass(frozen=True, slots=True)
class Summary:
    num_requests: int
    num_finished: int
    num_rejected: int
    num_unfinished: int
    output_tok_s: float  # generated tokens of finished requests / (last finish - first arrival): vLLM benchmarks'
    window_tok_s: float  # tokens generated while requests arrive (first to last arrival) / that span
    total_tok_s: float  # (prompt + generated) tokens of finished requests / (last finish - first arrival)
    steady_output_tok_s: float  # tokens generated in the steady-state window / its length (module docstring)
    steady_total_tok_s: float  # the same plus prompt tokens of requests whose first token falls in the window
    steady_window_s: float
    makespan_s: float
    mean_latency_s: float | None
    p50_latency_s: float | None
    p99_latency_s: float | None
    mean_norm_latency_s: float | None  # mean over requests of latency / output tokens (the papers' y-axis)
    mean_ttft_s: float | None
    p99_ttft_s: float | None
    mean_tpot_s: float | None  # `tpot_s` over finished requests of 2+ output tokens
    p99_tpot_s: float | None
    mean_ttft_ms: float | None
    p50_ttft_ms: float | None
    p99_ttft_ms: float | None
    mean_tpot_ms: float | None
    p50_tpot_ms: float | None
    p99_tpot_ms: float | None

    @property
    def num_failed(self) -> int:
        return self.num_requests - self.num_finished

    def to_dict(self) -> dict:
        return {**asdict(self), "num_failed": self.num_failed}


def tpot_s(record) -> float | None:
    """Time per output token after the first (vLLM benchmarks' TPOT): (finish - first token) / (output tokens - 1);
    None for a request not finished or of one output token."""
    if record.status != FINISHED or record.output_len < 2:
        return None
    return (record.finish_s - record.first_token_s) / (record.output_len - 1)


def _stats(values, scale: float = 1.0) -> tuple:
    if not len(values):
        return None, None, None
    arr = np.asarray(values, dtype=float) * scale
    return float(arr.mean()), float(np.percentile(arr, 50)), float(np.percentile(arr, 99))


def _tokens_between(ends: np.ndarray, tokens: np.ndarray, t0: float, t1: float) -> float:
    return float(tokens[(ends >= t0) & (ends <= t1)].sum())


def summarize_records(records, step_end_s=(), step_tokens=()) -> Summary:
    """The summary of one serving run (see the module docstring for the windows)."""
    records = list(records)
    done = [r for r in records if r.status == FINISHED]
    n = len(records)
    rejected = sum(r.status == REJECTED for r in records)
    unfinished = n - len(done) - rejected
    if not done:
        return Summary(n, 0, rejected, unfinished, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, *([None] * 14))
    arrivals = np.sort([r.arrival_s for r in records])
    start = float(arrivals[0])
    span = max(r.finish_s for r in done) - start
    out = sum(r.output_len for r in done)
    prompt = sum(r.prompt_len for r in done)
    ends, tokens = np.asarray(step_end_s, dtype=float), np.asarray(step_tokens, dtype=float)
    window_s = float(arrivals[-1]) - start
    if window_s > 0:
        window_tok_s = _tokens_between(ends, tokens, start, start + window_s) / window_s
    else:
        window_tok_s = out / span if span > 0 else 0.0
    steady_start = steady_start_s(arrivals)
    finishes = np.sort([r.finish_s for r in done])
    steady_end = max(float(arrivals[-1]), float(finishes[min(len(done), drain_rank(n)) - 1]))
    steady_s = steady_end - steady_start
    if steady_s > 0 and len(ends):
        steady_out = _tokens_between(ends, tokens, steady_start, steady_end) / steady_s
        prefilled = sum(r.prompt_len for r in records if r.first_token_s is not None
                        and steady_start <= r.first_token_s <= steady_end)
        steady_total = steady_out + prefilled / steady_s
    else:  # a burst, or no step timeline: the whole run is the window
        steady_s = span
        steady_out = out / span if span > 0 else 0.0
        steady_total = (out + prompt) / span if span > 0 else 0.0
    lat = [r.finish_s - r.arrival_s for r in done]
    ttft = [r.first_token_s - r.arrival_s for r in done]
    tpot = [t for t in map(tpot_s, done) if t is not None]
    mean_lat, p50_lat, p99_lat = _stats(lat)
    mean_ttft, _, p99_ttft = _stats(ttft)
    mean_tpot, _, p99_tpot = _stats(tpot)
    return Summary(n, len(done), rejected, unfinished, out / span if span > 0 else 0.0, window_tok_s,
                   (out + prompt) / span if span > 0 else 0.0, steady_out, steady_total, steady_s, float(span),
                   mean_lat, p50_lat, p99_lat, float(np.mean([r.latency_s / r.output_len for r in done])),
                   mean_ttft, p99_ttft, mean_tpot, p99_tpot, *_stats(ttft, 1e3), *_stats(tpot, 1e3))
