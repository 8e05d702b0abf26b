"""sim-vs-real: one measured or predicted run summarised, the points (median of repeats), the error table, the figure."""
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


LABELS = {"output_tok_s": "output tokens/s", "mean_ttft_s": "mean TTFT (s)", "mean_tpot_s": "mean TPOT (s)",
          "mean_latency_s": "mean latency (s)"}


def draw_points(points: list[dict], metrics=METRICS):
    """A figure of one panel per metric: measured and predicted medians by rate, bars from min to max."""
    import pandas as pd

    from repro.framework.figures import new_figure, sns

    rows = []
    for p in points:
        for metric in metrics:
            for side in ("measured", "predicted"):
                if p.get(f"{side}_{metric}") is not None:  # (runs before a metric was recorded lack it)
                    rows.append({"system": p["system"], "rate_per_s": p["rate_per_s"], "metric": metric,
                                 "side": side, "value": p[f"{side}_{metric}"],
                                 "low": p[f"{side}_{metric}_min"], "high": p[f"{side}_{metric}_max"]})
    frame = pd.DataFrame(rows)
    fig, axes = new_figure(len(metrics), width_in=4.0, height_in=3.2)
    for ax, metric in zip(axes, metrics):
        chosen = frame[frame["metric"] == metric]
        sns.lineplot(chosen, x="rate_per_s", y="value", hue="system", style="side", markers=True, ax=ax,
                     legend=ax is axes[0])
        for side, shift, color in (("measured", 0.97, "0.2"), ("predicted", 1.03, "0.6")):
            spread = chosen[chosen["side"] == side].dropna(subset=["low", "high"])
            ax.vlines(spread["rate_per_s"] * shift, spread["low"], spread["high"], color=color, linewidth=1)
        ax.set(xlabel="request rate (1/s)", ylabel=LABELS[metric], title=LABELS[metric], xscale="log")
        rates = sorted(chosen["rate_per_s"].unique())
        ax.set_xticks(rates, [f"{r:g}" for r in rates], minor=False)
        ax.set_xticks([], minor=True)
        if metric != "output_tok_s":
            ax.set_yscale("log")
    return fig


def plot(results, figures_dir) -> list[str]:
    from repro.framework.figures import main_result, save

    data = main_result(results)["data"]
    fig = draw_points(data["points"])
    clock = {"cpu": "process CPU time", "wall": "wall clock"}[data["clock"]]
    vllm = "; real vLLM: wall clock" if "vllm_arm" in data else ""
    fig.suptitle(f"simulator vs real engine: {data['model']} on {data['machine']['device']} "
                 f"({data['machine']['threads']} thread, {clock}{vllm}), {data['repeats']} repeats (bars: min-max, "
                 f"measured dark, predicted light), load average {data['machine']['loadavg_1m_median']:.1f} on "
                 f"{data['machine']['cpu_count']} cores", fontsize=9)
    written = save(fig, figures_dir, "sim-vs-real")
    # the pooled figure: the main run's arm, else the last full run that has one, else the last --quick run's
    with_arm = sorted((r for r in results if "pooled_arm" in r["data"]), key=lambda r: not r["params"]["quick"])
    if "pooled_arm" in data or with_arm:
        data = data if "pooled_arm" in data else with_arm[-1]["data"]
        arm = data["pooled_arm"]
        fig = draw_points(arm["points"], ("output_tok_s", "mean_latency_s", "mean_tpot_s"))
        fig.suptitle(f"simulator vs real pooled cluster: {arm['setup']['num_instances']} Ray instances of "
                     f"{arm['instance_tokens']} KV tokens, trace {data['trace_id']} scaled (its "
                     f"{arm['long_quantile']:g} quantile fills an instance), wall clock;\nmax-throughput ratio "
                     f"Infinite-LLM / vLLM-M measured {_fmt(arm['measured_max_tput_ratio'])}, predicted "
                     f"{_fmt(arm['predicted_max_tput_ratio'])}; load average {arm['loadavg_1m']['median']:.1f}",
                     fontsize=9)
        written += save(fig, figures_dir, "sim-vs-real-pooled")
    return written


def _fmt(ratio) -> str:
    return "-" if ratio is None else f"{ratio:.2f}x"
