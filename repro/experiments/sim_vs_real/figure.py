"""sim-vs-real's figures: measured and predicted points by rate, for the local arm and the pooled arm (apart from
points.py, which validate-gpu imports where pandas and matplotlib may be missing)."""
import pandas as pd

from repro.experiments.sim_vs_real.points import METRICS
from repro.framework.figures import main_result, new_figure, save, sns

LABELS = {"output_tok_s": "output tokens/s", "mean_ttft_s": "mean TTFT (s)", "mean_tpot_s": "mean TPOT (s)",
          "mean_latency_s": "mean latency (s)"}


def draw_points(points: list[dict], metrics=METRICS):
    """A figure of one panel per metric: measured and predicted medians by rate, bars from min to max."""
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
