"""sim-vs-real: one measured or predicted run summarised, the points (median of repeats), the error table
(the figure: figure.py)."""
from dataclasses import asdict, dataclass

import numpy as np

from reference_impl.serving.records import ServingRun

METRICS = ("output_tok_s", "mean_ttft_s", "mean_tpot_s", "mean_latency_s")


@dataclass(frozen=True, slots=True)
class RunSummary:
    """One serving run (measured on the engine or simulated): the compared metrics and the counts."""

    output_tok_s: float
    mean_ttft_s: float | None
    mean_tpot_s: float | None
    mean_latency_s: float | None
    num_finished: int
    num_requests: int
    makespan_s: float
    num_steps: int


def run_summary(result: ServingRun) -> RunSummary:
    s = result.summary()
    return RunSummary(s.output_tok_s, s.mean_ttft_s, s.mean_tpot_s, s.mean_latency_s, s.num_finished, s.num_requests,
                      s.makespan_s, result.num_steps)


@dataclass(frozen=True, slots=True)
class Point:
    """One system at one rate: medians over repeats of the measured and the predicted runs (each predicted run from
    the calibration taken just before its measured one), and the spread of both."""

    system: str
    rate_per_s: float
    num_repeats: int
    measured_output_tok_s: float
    predicted_output_tok_s: float
    measured_output_tok_s_min: float
    measured_output_tok_s_max: float
    predicted_output_tok_s_min: float
    predicted_output_tok_s_max: float
    measured_mean_ttft_s: float | None
    predicted_mean_ttft_s: float | None
    measured_mean_ttft_s_min: float | None
    measured_mean_ttft_s_max: float | None
    predicted_mean_ttft_s_min: float | None
    predicted_mean_ttft_s_max: float | None
    measured_mean_tpot_s: float | None
    predicted_mean_tpot_s: float | None
    measured_mean_tpot_s_min: float | None
    measured_mean_tpot_s_max: float | None
    predicted_mean_tpot_s_min: float | None
    predicted_mean_tpot_s_max: float | None
    measured_mean_latency_s: float | None
    predicted_mean_latency_s: float | None
    measured_mean_latency_s_min: float | None
    measured_mean_latency_s_max: float | None
    predicted_mean_latency_s_min: float | None
    predicted_mean_latency_s_max: float | None
    output_tok_s_rel_err: float | None  # predicted / measured - 1 (medians)
    mean_ttft_s_rel_err: float | None
    mean_tpot_s_rel_err: float | None
    mean_latency_s_rel_err: float | None


def _median(values) -> float | None:
    values = [v for v in values if v is not None]
    return float(np.median(values)) if values else None


def _rel_err(predicted, measured) -> float | None:
    if predicted is None or measured is None or measured <= 0:
        return None
    return predicted / measured - 1.0


def make_points(runs: list[dict]) -> list[dict]:
    """Points from run records {system, rate_per_s, measured: RunSummary dict, predicted: RunSummary dict}."""
    points = []
    for system, rate in sorted({(r["system"], r["rate_per_s"]) for r in runs}):
        group = [r for r in runs if r["system"] == system and r["rate_per_s"] == rate]
        values = {}
        for metric in METRICS:
            for side in ("measured", "predicted"):
                got = [r[side][metric] for r in group if r[side].get(metric) is not None]
                values[f"{side}_{metric}"] = _median(got)
                values[f"{side}_{metric}_min"] = min(got, default=None)
                values[f"{side}_{metric}_max"] = max(got, default=None)
            values[f"{metric}_rel_err"] = _rel_err(values[f"predicted_{metric}"], values[f"measured_{metric}"])
        points.append(asdict(Point(system, rate, len(group), **values)))
    return points


def error_table(points: list[dict]) -> dict:
    """Per system and metric: median and worst |predicted / measured - 1| over rates, and the worst rate."""
    table = {}
    for system in sorted({p["system"] for p in points}):
        rows = {}
        for metric in METRICS:
            errs = [(abs(p[f"{metric}_rel_err"]), p["rate_per_s"]) for p in points
                    if p["system"] == system and p[f"{metric}_rel_err"] is not None]
            if errs:
                worst, at = max(errs)
                rows[metric] = {"median_abs_rel_err": float(np.median([e for e, _ in errs])),
                                "worst_abs_rel_err": worst, "worst_rate_per_s": at, "num_points": len(errs)}
        table[system] = rows
    return table
