"""The figures serving papers are read through, beside the throughput-latency curves of plots.py: TTFT and TPOT
(p50 or mean, and p99) against the offered rate per system with the seeds' spread (from stored points), and for one
group re-simulated at seed 0: TTFT/TPOT distributions at one rate, SLO attainment against rate, and one run's
throughput over time with its steady-state window marked."""
import numpy as np

from reference_impl.serving.records import FINISHED, steady_start_s, tpot_s
from reference_impl.systems.catalog import DESIGN_NAMES
from reference_impl.systems.pd_disagg.headline import CHATBOT_SLO, Slo, attainment
from repro.framework.figures import new_figure, plt, save
from repro.serving.plots import PALETTE

METRICS = (("ttft", "TTFT (s)"), ("tpot", "TPOT (s)"))


# every design its own colour, the three of Fig 10 as plots.py draws them
COLORS = {**dict(zip(DESIGN_NAMES, ("tab:blue", "tab:green", "tab:red", "tab:orange", "tab:purple", "tab:brown",
                                    "tab:pink"))), **PALETTE}


def color(system: str, systems: list[str]):
    return COLORS.get(system) or plt.get_cmap("tab10")(systems.index(system) % 10)


def spread(points: list[dict], system: str, key: str) -> list[tuple[float, float, float, float]]:
    """Per rate (ascending): (rate, median, min, max) of `key` over the seeds' points of `system`."""
    rows = []
    for rate in sorted({p["rate_per_s"] for p in points if p["system"] == system}):
        values = [p[key] for p in points if p["system"] == system and p["rate_per_s"] == rate
                  and p.get(key) is not None]
        if values:
            rows.append((rate, float(np.median(values)), min(values), max(values)))
    return rows


def latency_vs_rate(groups: list[dict], figures_dir: str, name: str, title: str) -> list[str]:
    """A row per group, TTFT and TPOT against the offered rate per system: p99 solid, p50 dashed (the mean, dotted,
    where the points hold no p50); markers the median over seeds, bands their min-max."""
    if not groups:
        return []
    fig, _ = new_figure()
    plt.close(fig)
    fig, axes = plt.subplots(len(groups), 2, figsize=(9, 2.4 * len(groups) + 0.6), squeeze=False)
    for i, (row, g) in enumerate(zip(axes, groups)):
        systems = list(dict.fromkeys(p["system"] for p in g["points"]))
        for ax, (metric, label) in zip(row, METRICS):
            has_p50 = any(p.get(f"p50_{metric}_s") is not None for p in g["points"])
            for system in systems:
                for stat, style in (("p99", "-"), ("p50", "--") if has_p50 else ("mean", ":")):
                    rows = spread(g["points"], system, f"{stat}_{metric}_s")
                    if not rows:
                        continue
                    rate, mid, low, high = (np.array(c) for c in zip(*rows))
                    ax.plot(rate, mid, style, marker="o", ms=2.5, lw=1, color=color(system, systems),
                            label=f"{system} {stat}")
                    ax.fill_between(rate, low, high, color=color(system, systems), alpha=0.15, lw=0)
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel("offered rate (requests/s)", fontsize=7)
            ax.set_ylabel(label, fontsize=7)
            ax.set_title(f"trace {g['trace_id']}: {g['model']}, {g['num_gpus']} GPUs", fontsize=7, loc="left")
            ax.tick_params(which="both", labelsize=6)
        if i == 0:
            row[1].legend(fontsize=5, ncol=2)
    fig.suptitle(title, fontsize=8)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.35 / fig.get_figheight()))
    return save(fig, figures_dir, name, layout=False)


def detail_rate(group: dict) -> float:
    """The group's rate nearest the lowest saturation of its systems: where they start to differ."""
    saturation = min(group["saturation_per_s"].values())
    return min(group["rates_per_s"], key=lambda r: abs(r - saturation))


def latencies(run, metric: str) -> np.ndarray:
    done = [r for r in run.requests if r.status == FINISHED]
    if metric == "ttft":
        return np.sort([r.first_token_s - r.arrival_s for r in done])
    return np.sort([t for t in map(tpot_s, done) if t is not None])


def serving_detail(runs: dict[str, dict[float, object]], rate: float, figures_dir: str, name: str, title: str,
                   slo: Slo = CHATBOT_SLO, bin_s: float = 5.0) -> list[str]:
    """Four panels from `runs` (system -> rate -> ServingRun): CDFs of TTFT and TPOT at `rate`, SLO attainment
    against rate, and throughput over time of the run at `rate` with its steady-state window shaded."""
    systems = list(runs)
    fig, axes = new_figure(4, 3.3, 2.9)
    for system in systems:
        c = color(system, systems)
        run = runs[system][rate]
        for ax, (metric, label), style in zip(axes[:2], METRICS, ("-", "-")):
            values = latencies(run, metric)
            ax.plot(values, np.arange(1, len(values) + 1) / len(values), style, lw=1, color=c, label=system)
            ax.set_xscale("log")
            ax.set_xlabel(label, fontsize=7)
            ax.set_ylabel("share of finished requests", fontsize=7)
            ax.set_title(f"{label.split()[0]} distribution at {rate:.3g} req/s", fontsize=7)
        rates = sorted(runs[system])
        axes[2].plot(rates, [100 * attainment(runs[system][r], slo) for r in rates], marker="o", ms=3, lw=1,
                     color=c, label=system)
        times_s, tok_s = run.throughput_over_time(bin_s)
        axes[3].plot(times_s, tok_s, lw=1, color=c, label=system)
        start = steady_start_s(sorted(r.arrival_s for r in run.requests))
        axes[3].axvspan(start, start + run.summary().steady_window_s, color=c, alpha=0.1, lw=0)
    axes[0].axvline(slo.ttft_s, color="grey", ls=":", lw=0.8)
    axes[1].axvline(slo.tpot_s, color="grey", ls=":", lw=0.8)
    axes[2].axhline(100 * slo.attainment, color="grey", ls=":", lw=0.8)
    axes[2].set_xlabel("offered rate (requests/s)", fontsize=7)
    axes[2].set_ylabel("requests meeting the SLO (%)", fontsize=7)
    axes[2].set_title(f"SLO TTFT <= {slo.ttft_s * 1e3:g} ms and TPOT <= {slo.tpot_s * 1e3:g} ms", fontsize=7)
    axes[3].set_xlabel("simulated time (s)", fontsize=7)
    axes[3].set_ylabel(f"output tokens/s ({bin_s:g} s bins)", fontsize=7)
    axes[3].set_title(f"one run at {rate:.3g} req/s; shaded: steady-state window", fontsize=7)
    for ax in axes:
        ax.tick_params(which="both", labelsize=6)
        ax.legend(fontsize=6)
    fig.suptitle(title, fontsize=8)
    return save(fig, figures_dir, name)
