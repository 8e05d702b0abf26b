"""Throughput-latency figures of the serving experiments (one panel per workload and cluster)."""
import math

import numpy as np

from repro.framework.figures import new_figure, plt, save
from repro.serving.curves import ratio_text

PALETTE = {"infinite-llm": "tab:blue", "vllm-m": "tab:green", "vllm-s": "tab:red"}


def seed_curve(points: list[dict], system: str, x_key: str = "steady_output_tok_s") -> list[tuple]:
    """Per rate (ascending): (rate, x mean, x min, x max, latency mean, latency min, latency max) over seeds."""
    rows = []
    for rate in sorted({p["rate_per_s"] for p in points if p["system"] == system}):
        own = [p for p in points if p["system"] == system and p["rate_per_s"] == rate
               and p["mean_norm_latency_s"] is not None]
        if own:
            x = np.array([p.get(x_key, p["output_tok_s"]) for p in own])
            y = np.array([p["mean_norm_latency_s"] for p in own])
            rows.append((rate, x.mean(), x.min(), x.max(), y.mean(), y.min(), y.max()))
    return rows


def plot_curves(groups: list[dict], figures_dir: str, name: str, key: str) -> list[str]:
    """One figure per panel value: mean normalised latency (s/token) against steady-state output throughput,
    per system, up to the rates that reached its plateau (repro/serving/plateau.py); markers are seed means, bars the
    seeds' min-max in both directions, the dashed line the plateau (max throughput) of each system."""
    written = []
    for panel in sorted({g["panel"] for g in groups}):
        chosen = [g for g in groups if g["panel"] == panel]
        ncols = min(6, len(chosen))
        nrows = math.ceil(len(chosen) / ncols)
        fig, _ = new_figure(1, 3.0, 2.6)
        plt.close(fig)
        fig, axes = plt.subplots(nrows, ncols, figsize=(3.1 * ncols, 2.7 * nrows), squeeze=False)
        for ax, g in zip(axes.flat, chosen):
            for system in dict.fromkeys(p["system"] for p in g["points"]):
                rows = seed_curve(g["points"], system)
                if not rows:
                    continue
                _, x, x0, x1, y, y0, y1 = (np.array(c) for c in zip(*rows))
                ax.errorbar(x, y, xerr=[x - x0, x1 - x], yerr=[y - y0, y1 - y], marker="o", ms=3, lw=1,
                            capsize=2, color=PALETTE.get(system), label=system)
                plateau = (g.get("max_tput_tok_s") or {}).get(system)
                if plateau:
                    ax.axvline(float(np.median(plateau)), color=PALETTE.get(system), ls="--", lw=0.7)
            rising = [s for s, r in (g.get("plateau") or {}).items() if not r["reached"]]
            ax.set_title(f"{key} {g.get(key + '_id')}: {g['model']}, {g['num_gpus']} GPUs\n"
                         f"max tput {ratio_text(g)}" + (f"\nstill rising: {', '.join(rising)}" if rising else ""),
                         fontsize=7)
            ax.set_xlabel("steady-state output tokens/s", fontsize=7)
            ax.set_ylabel("latency / token (s)", fontsize=7)
            ax.set_yscale("log")
            ax.tick_params(labelsize=6)
            if ax is axes.flat[0]:
                ax.legend(fontsize=6)
        for ax in list(axes.flat)[len(chosen):]:
            ax.set_visible(False)
        written += save(fig, figures_dir, f"{name}{panel}")
    return written
