"""One group's comparison of the designs (a record of designs.schema.json `group`): per design its max throughput
at the plateau and its ratio to the group's baseline (vLLM-M on traces 0-2, vLLM-S on 3-8) per seed, the latency
at the common rate and the counters there and at its plateau; a design that failed, with its error."""
import numpy as np

from repro.experiments.designs.normalise import normalised
from repro.serving.plateau import median_by_rate

COMMON_LOAD = 0.5  # the common rate: the grid rate nearest this share of the weakest design's saturation
LATENCIES = ("p50_ttft_s", "p99_ttft_s", "p50_tpot_s", "p99_tpot_s")
COUNTS = ("num_preemptions", "num_rejected", "num_moved_blocks")


def grid_rate(rates_per_s: list[float], target_per_s: float) -> float:
    """The rate of the grid nearest `target_per_s` (by ratio)."""
    return min(rates_per_s, key=lambda r: abs(np.log(r / target_per_s)))


def first_error(points: list[dict]) -> str | None:
    for p in points:
        if p.get("error"):
            return f"rate {p['rate_per_s']:.4g}/s seed {p['seed']}: {p['error']}"
    return None


def group_comparison(record: dict, failed: dict, designs: tuple[str, ...], hardware: dict) -> dict:
    """`record` (repro/serving/curves.py group_record of the designs that ran) as this experiment keeps it:
    `designs` in the catalog's order, those in `failed` (name -> why) with their error; `hardware` (design ->
    normalise.hardware of its cluster) for the cost-normalised throughput."""
    baseline = record["baseline"]
    plateau = record.get("max_tput_tok_s") or {}
    ran = [d for d in designs if d in plateau]
    saturation = record.get("saturation_per_s") or {}
    common = None
    if ran:  # the weakest of the designs that reject no request here (one that does saturates on fewer tokens)
        whole = [d for d in ran if not any(p["num_rejected"] for p in record["points"] if p["system"] == d)]
        common = grid_rate(record["rates_per_s"], COMMON_LOAD * min(saturation[d] for d in whole or ran))
    rows = {}
    for d in designs:
        if d in failed or d not in plateau:
            rows[d] = {"status": "failed", "error": failed.get(d, "not run")}
            continue
        own = [p for p in record["points"] if p["system"] == d]
        error = first_error(own)
        rows[d] = {"status": "failed" if error else "ok", "error": error,
                   "saturation_per_s": saturation[d], "max_tput_tok_s": plateau[d],
                   "max_tput_median_tok_s": float(np.median(plateau[d])),
                   **ratio_fields(plateau[d], plateau.get(baseline)),
                   "plateau_reached": record["plateau"][d]["reached"],
                   "at_common_rate": at_rate(own, common),
                   "at_plateau": at_rate(own, top_rate(own))}
        if d in hardware:
            rows[d].update(normalised(rows[d], hardware[d], hardware.get(baseline)))
    keep = ("trace_id", "panel", "model", "num_gpus", "num_instances", "tp", "baseline", "num_requests",
            "rates_per_s", "seeds", "saturation_per_s", "points", "arm", "engine", "design_knobs")
    return {**{k: record[k] for k in keep if k in record}, "common_rate_per_s": common, "designs": rows}


def ratio_fields(own: list[float], baseline: list[float] | None) -> dict:
    """The design's plateau over the baseline's, per seed: median, min, max (None without a baseline)."""
    ratios = [a / b for a, b in zip(own, baseline or []) if b > 0]
    if not ratios:
        return {"ratio": None, "ratio_min": None, "ratio_max": None}
    return {"ratio": float(np.median(ratios)), "ratio_min": min(ratios), "ratio_max": max(ratios)}


def top_rate(points: list[dict]) -> float | None:
    """The rate of a design's max throughput: the highest median steady-state output rate over seeds."""
    curve = median_by_rate(points)
    return max(curve, key=lambda rc: rc[1])[0] if curve else None


def at_rate(points: list[dict], rate_per_s: float | None) -> dict | None:
    """Medians over seeds at `rate_per_s`: latencies, counts and counters (None where no seed has a value)."""
    here = [p for p in points if p["rate_per_s"] == rate_per_s]
    if not here:
        return None
    out = {"rate_per_s": rate_per_s, "steady_output_tok_s": _median(here, "steady_output_tok_s")}
    for key in (*LATENCIES, *COUNTS):
        out[key] = _median(here, key)
    names = sorted({k for p in here for k in (p.get("counters") or {})})
    out["counters"] = {k: _median([p.get("counters") or {} for p in here], k) for k in names}
    return out


def _median(rows: list[dict], key: str) -> float | None:
    values = [r[key] for r in rows if r.get(key) is not None]
    return float(np.median(values)) if values else None
