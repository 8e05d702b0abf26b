"""The designs figure: which design wins where, at a glance. A heatmap of groups (rows) by designs (columns): each
design's max throughput at the plateau over the group's baseline (vLLM-M on traces 0-2, vLLM-S on 3-8), median
over seeds, annotated; blue above 1, red below (log scale); "failed" where the design could not serve the group;
"rej N%" where it rejected that share of the requests at its plateau (those it cannot hold: its ratio counts only
the requests it served, not the baseline's work); a box on each row's best of the designs that rejected none (of
all when every one did). A second panel does the same per dollar (the cluster at lamina Table 1's prices,
normalise.py), each cell also giving the ratio at the same number of accelerators ("acc"): where a design's hardware
differs from the baseline's (Lamina's memory devices), the two panels differ."""
import numpy as np
from matplotlib.patches import Rectangle

from repro.framework.figures import main_result, new_figure, plt, save

NAME = "designs-max-tput"


def grid(groups: list[dict], designs: list[str], key: str = "ratio") -> tuple[np.ndarray, list[list[str]], list[str],
                                                                           np.ndarray]:
    """(ratios [groups x designs] of `key` ("ratio", "ratio_per_usd"), NaN where failed; cell texts; row labels;
    whether the design rejected requests at its plateau)."""
    ratios = np.full((len(groups), len(designs)), np.nan)
    rejects = np.zeros((len(groups), len(designs)), dtype=bool)
    texts = [["" for _ in designs] for _ in groups]
    for i, g in enumerate(groups):
        for j, d in enumerate(designs):
            row = g["designs"].get(d)
            if row is None:
                continue
            if row["status"] != "ok" or row.get(key) is None:
                texts[i][j] = "failed"
                continue
            ratios[i, j] = row[key]
            rejected = (row.get("at_plateau") or {}).get("num_rejected") or 0
            rejects[i, j] = rejected > 0
            acc = f"\nacc {row['ratio_per_accelerator']:.2f}" if key == "ratio_per_usd" else ""
            texts[i][j] = f"{row[key]:.2f}{acc}" + (f"\nrej {rejected / g['num_requests']:.0%}" if rejected else "")
    labels = [f"trace {g['trace_id']}: {g['model'].removeprefix('llama2-').upper()} x{g['num_gpus']} "
              f"(vs {g['baseline']})" for g in groups]
    return ratios, texts, labels, rejects


def plot_designs(results: list[dict], figures_dir: str) -> list[str]:
    result = main_result(results)
    data = result["data"]
    groups, designs = data["groups"], data["designs"]
    fig, _ = new_figure()
    plt.close(fig)
    fig, axes = plt.subplots(1, 2, figsize=(2 * (1.1 * len(designs) + 3.2), 0.5 * len(groups) + 1.8))
    panels = (("ratio", "Max throughput at the plateau"), ("ratio_per_usd", "The same per dollar (acc: per accelerator)"))
    for ax, (key, what) in zip(axes, panels):
        _panel(ax, groups, designs, key)
        ax.set_title(f"{what} over vLLM-M (traces 0-2) / vLLM-S (traces 3-8)\n{result['run_id']}, "
                     f"{len(data['seeds'])} seed(s); box: the group's best of those that reject none; "
                     f"rej: requests rejected at the plateau", fontsize=8)
    axes[1].set_yticklabels([])
    fig.tight_layout()
    return save(fig, figures_dir, NAME)


def _panel(ax, groups: list[dict], designs: list[str], key: str) -> None:
    import seaborn as sns

    ratios, texts, labels, rejects = grid(groups, designs, key)
    logs = np.log2(ratios)
    span = max(0.25, float(np.nanmax(np.abs(logs)))) if np.isfinite(logs).any() else 1.0
    sns.heatmap(logs, ax=ax, cmap="RdBu", center=0.0, vmin=-span, vmax=span, annot=np.array(texts, dtype=object),
                fmt="", annot_kws={"fontsize": 7}, linewidths=0.5, linecolor="white",
                cbar_kws={"label": "ratio to the baseline"},
                xticklabels=designs, yticklabels=labels)
    bar = ax.collections[0].colorbar
    ticks = [t for t in bar.get_ticks() if -span <= t <= span]
    bar.set_ticks(ticks)
    bar.set_ticklabels([f"{2 ** t:.2g}x" for t in ticks])
    for i in range(len(groups)):
        whole = np.where(rejects[i], np.nan, ratios[i])  # the best of those that served every request, if any
        row = whole if np.isfinite(whole).any() else ratios[i]
        if np.isfinite(row).any():
            j = int(np.nanargmax(row))
            ax.add_patch(Rectangle((j, i), 1, 1, fill=False, edgecolor="black", lw=1.6))
    ax.tick_params(labelsize=7)
    ax.set_xticklabels(ax.get_xticklabels(), rotation=30, ha="right")
