"""Per-request records of a serving run (real vLLM or our local engine) and their summary numbers.

Definitions follow vLLM's benchmarks: TTFT = first token - arrival; TPOT = (finish - first token) /
(output tokens - 1); latency = finish - arrival; throughput = output tokens of finished requests /
(last finish - first arrival), the span the simulator's Summary uses too.
"""
from dataclasses import asdict, dataclass

import numpy as np

FINISHED, REJECTED, UNFINISHED = "finished", "rejected", "unfinished"


@dataclass(slots=True)
class ServedRequest:
    req_id: int
    arrival_s: float
    prompt_len: int
    output_len: int  # tokens generated (finished) or asked for (otherwise)
    engine: int | None = None
    status: str = UNFINISHED
    first_token_s: float | None = None
    finish_s: float | None = None

    @property
    def ttft_s(self) -> float:
        return self.first_token_s - self.arrival_s

    @property
    def latency_s(self) -> float:
        return self.finish_s - self.arrival_s


@dataclass(frozen=True, slots=True)
class ServingSummary:
    num_requests: int
    num_finished: int
    num_failed: int  # rejected or unfinished
    output_tok_s: float
    total_tok_s: float
    makespan_s: float
    mean_ttft_ms: float | None
    p50_ttft_ms: float | None
    p99_ttft_ms: float | None
    mean_tpot_ms: float | None
    p50_tpot_ms: float | None
    p99_tpot_ms: float | None
    mean_latency_s: float | None
    p50_latency_s: float | None
    p99_latency_s: float | None
    mean_norm_latency_s: float | None  # latency / output tokens, averaged over requests

    def to_dict(self) -> dict:
        return asdict(self)


def from_runner(records: list[dict], requests: list[dict]) -> list[ServedRequest]:
    """ServedRequests from the runner's output records and the job's requests (same req_ids)."""
    by_id = {r["req_id"]: r for r in requests}
    served = []
    for rec in records:
        req = by_id[rec["req_id"]]
        done = rec["status"] == FINISHED
        served.append(ServedRequest(rec["req_id"], rec["arrival_s"], len(req["prompt_ids"]),
                                    len(rec["output_ids"]) if done else req["max_tokens"], rec["engine"],
                                    rec["status"], rec["first_token_s"], rec["finish_s"]))
    return served


def _stats(values: list[float], scale: float) -> tuple[float | None, float | None, float | None]:
    if not values:
        return None, None, None
    arr = np.asarray(values) * scale
    return float(arr.mean()), float(np.percentile(arr, 50)), float(np.percentile(arr, 99))


def summarize(served: list[ServedRequest]) -> ServingSummary:
    done = [r for r in served if r.status == FINISHED]
    n = len(served)
    if not done:
        return ServingSummary(n, 0, n, 0.0, 0.0, 0.0, *([None] * 10))
    span_s = max(r.finish_s for r in done) - min(r.arrival_s for r in served)
    out = sum(r.output_len for r in done)
    total = out + sum(r.prompt_len for r in done)
    tpot = [(r.finish_s - r.first_token_s) / (r.output_len - 1) for r in done if r.output_len > 1]
    return ServingSummary(
        n, len(done), n - len(done), out / span_s if span_s > 0 else 0.0, total / span_s if span_s > 0 else 0.0,
        span_s, *_stats([r.ttft_s for r in done], 1e3), *_stats(tpot, 1e3), *_stats([r.latency_s for r in done], 1.0),
        float(np.mean([r.latency_s / r.output_len for r in done])))
