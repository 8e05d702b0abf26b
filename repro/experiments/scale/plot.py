"""The scale figure: Infinite-LLM's max-throughput ratio over vLLM-M against the cluster size, per trace (seed
spread as bars), and the gManager's round (CPU ms) at each size on a second axis."""
import numpy as np

from repro.framework.figures import new_figure, save


def plot_scale(data: dict, figures_dir: str) -> list[str]:
    fig, (ax,) = new_figure(1, 5.0, 3.4)
    for trace in dict.fromkeys(g["trace_id"] for g in data["groups"]):
        own = sorted((g for g in data["groups"] if g["trace_id"] == trace), key=lambda g: g["num_gpus"])
        x = [g["num_gpus"] for g in own]
        y = np.array([np.nan if g["max_tput_ratio"] is None else g["max_tput_ratio"] for g in own])
        lo = np.array([np.nan if g.get("max_tput_ratio_min") is None else g["max_tput_ratio_min"] for g in own])
        hi = np.array([np.nan if g.get("max_tput_ratio_max") is None else g["max_tput_ratio_max"] for g in own])
        ax.errorbar(x, y, yerr=[np.nan_to_num(y - lo), np.nan_to_num(hi - y)], marker="o", ms=3, lw=1, capsize=2,
                    label=f"trace {trace}")
    ax.axhline(1.0, color="0.4", lw=0.6)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("GPUs (LLaMA2-7B instances of one A100)", fontsize=7)
    ax.set_ylabel("max throughput, Infinite-LLM / vLLM-M", fontsize=7)
    rounds = data.get("gmanager_rounds") or []
    if rounds:
        twin = ax.twinx()
        twin.plot([r["num_instances"] for r in rounds], [1e3 * r["round_s"] for r in rounds], "k--", lw=0.8,
                  marker="s", ms=2, label="gManager round")
        twin.set_ylabel("gManager round, CPU ms (this machine)", fontsize=7)
        twin.tick_params(labelsize=6)
        twin.legend(fontsize=5, loc="lower right")
    ax.tick_params(labelsize=6)
    ax.legend(fontsize=5, loc="upper left")
    return save(fig, figures_dir, "infinite-llm-scale")
