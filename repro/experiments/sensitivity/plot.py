"""The sensitivity figure: per input, each Fig 10 group's max-throughput ratio over the input's arms."""
import numpy as np

from repro.framework.figures import new_figure, save

PANEL_RANGE = {"10a": (1.35, 1.73), "10b": (1.4, 3.4)}


def plot_sensitivity(data: dict, figures_dir: str) -> list[str]:
    inputs = list(dict.fromkeys(r["input"] for r in data["rows"]))
    written = []
    for panel, (low, high) in PANEL_RANGE.items():
        rows = [r for r in data["rows"] if r["panel"] == panel]
        if not rows:
            continue
        fig, axes = new_figure(len(inputs), 2.6, 2.8)
        for ax, inp in zip(axes, inputs):
            own = [r for r in rows if r["input"] == inp]
            labels = list(dict.fromkeys(r["label"] for r in own))
            for key in dict.fromkeys((r["trace_id"], r["num_gpus"]) for r in own):
                line = [next((r for r in own if r["label"] == lab and (r["trace_id"], r["num_gpus"]) == key), None)
                        for lab in labels]
                y = np.array([np.nan if r is None or r["ratio"] is None else r["ratio"] for r in line])
                lo = np.array([np.nan if r is None or r["ratio_min"] is None else r["ratio_min"] for r in line])
                hi = np.array([np.nan if r is None or r["ratio_max"] is None else r["ratio_max"] for r in line])
                ax.errorbar(range(len(labels)), y, yerr=[y - lo, hi - y], marker="o", ms=3, lw=1, capsize=2,
                            label=f"trace {key[0]}, {key[1]} GPUs")
            ax.axhspan(low, high, color="0.85", zorder=0)
            ax.axhline(1.0, color="0.4", lw=0.6)
            ax.set_xticks(range(len(labels)), labels, rotation=30, ha="right", fontsize=6)
            ax.set_title(inp, fontsize=8)
            ax.tick_params(labelsize=6)
        axes[0].set_ylabel(f"Fig {panel} max-throughput ratio", fontsize=7)
        axes[0].legend(fontsize=5)
        written += save(fig, figures_dir, f"infinite-llm-fig10-sensitivity-{panel}")
    return written
