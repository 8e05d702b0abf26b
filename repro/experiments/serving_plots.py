"""Throughput-latency figures of the serving experiments (one panel per workload and cluster)."""
import math

import pandas as pd

from repro.experiments.figures import new_figure, plt, save, sns

PALETTE = {"infinite-llm": "tab:blue", "vllm-m": "tab:green", "vllm-s": "tab:red"}


def plot_curves(groups: list[dict], figures_dir: str, name: str, key: str) -> list[str]:
    """One figure per panel value: normalised latency (s/token) against output throughput, per system."""
    written = []
    for panel in sorted({g["panel"] for g in groups}):
        chosen = [g for g in groups if g["panel"] == panel]
        ncols = min(6, len(chosen))
        nrows = math.ceil(len(chosen) / ncols)
        fig, _ = new_figure(1, 3.0, 2.6)
        plt.close(fig)
        fig, axes = plt.subplots(nrows, ncols, figsize=(3.0 * ncols, 2.6 * nrows), squeeze=False)
        for ax, g in zip(axes.flat, chosen):
            rows = pd.DataFrame([p for p in g["points"] if p["mean_norm_latency_s"] is not None])
            if not rows.empty:
                sns.lineplot(rows, x="output_tok_s", y="mean_norm_latency_s", hue="system", marker="o",
                             palette=PALETTE, ax=ax, legend=ax is axes.flat[0], sort=False)
            ratio = g["max_tput_ratio"]
            ax.set_title(f"{key} {g.get(key + '_id')}: {g['model']}, {g['num_gpus']} GPUs"
                         + ("" if ratio is None else f"\nmax tput {ratio:.2f}x"), fontsize=8)
            ax.set_xlabel("output tokens/s")
            ax.set_ylabel("latency / token (s)")
            ax.set_yscale("log")
        for ax in list(axes.flat)[len(chosen):]:
            ax.set_visible(False)
        written += save(fig, figures_dir, f"{name}{panel}")
    return written
