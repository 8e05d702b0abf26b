"""One point of a serving curve, whatever ran it, and the max-throughput ratio of a short run."""
from dataclasses import asdict, dataclass

from reference_impl.serving.records import ServingRun, Summary


@dataclass(frozen=True, slots=True)
class ServingPoint:
    """One point of a serving curve (repro/schemas/serving.schema.json `point`), whatever ran it."""
    system: str
    rate_per_s: float
    num_requests: int
    num_finished: int
    num_rejected: int
    num_unfinished: int
    output_tok_s: float
    window_tok_s: float
    total_tok_s: float
    steady_output_tok_s: float
    steady_total_tok_s: float
    mean_norm_latency_s: float | None
    mean_latency_s: float | None
    p99_latency_s: float | None
    mean_ttft_s: float | None
    p99_ttft_s: float | None
    makespan_s: float
    num_preemptions: int
    num_moved_blocks: int
    idle_waiting_frac: float
    wall_s: float  # wall time of the run (simulated or real)
    seed: int = 0
    mean_tpot_s: float | None = None
    p99_tpot_s: float | None = None
    peak_batch_size: int | None = None  # the largest running batch of any instance (simulated runs)

    @classmethod
    def of(cls, system: str, rate_per_s: float, s: Summary, *, wall_s: float, seed: int = 0, num_preemptions: int = 0,
           num_moved_blocks: int = 0, idle_waiting_frac: float = 0.0,
           peak_batch_size: int | None = None) -> "ServingPoint":
        return cls(system, rate_per_s, s.num_requests, s.num_finished, s.num_rejected, s.num_unfinished,
                   s.output_tok_s, s.window_tok_s, s.total_tok_s, s.steady_output_tok_s, s.steady_total_tok_s,
                   s.mean_norm_latency_s, s.mean_latency_s, s.p99_latency_s, s.mean_ttft_s, s.p99_ttft_s,
                   s.makespan_s, num_preemptions, num_moved_blocks, idle_waiting_frac, round(wall_s, 3), seed,
                   s.mean_tpot_s, s.p99_tpot_s, peak_batch_size)

    @classmethod
    def of_result(cls, system: str, rate_per_s: float, result: ServingRun, *, wall_s: float,
                  seed: int = 0) -> "ServingPoint":
        """The point of a simulated or Ray run (a ServingRun)."""
        return cls.of(system, rate_per_s, result.summary(), wall_s=wall_s, seed=seed,
                      num_preemptions=sum(r.num_preemptions for r in result.requests),
                      num_moved_blocks=result.num_moved_blocks,
                      idle_waiting_frac=result.idle_waiting_frac, peak_batch_size=result.peak_batch_size)

    def to_dict(self) -> dict:
        return asdict(self)


def best_ratio(points: list[dict], system: str, baseline: str) -> float | None:
    """Highest steady-state output rate over the rates run, `system` over `baseline`: the max-throughput ratio
    of a short single-seed run (the simulated curves use the plateau of repro/serving/curves.py)."""
    best = {s: max((p["steady_output_tok_s"] for p in points if p["system"] == s), default=0.0)
            for s in (system, baseline)}
    return best[system] / best[baseline] if best[baseline] > 0 else None
