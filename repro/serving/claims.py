"""What a serving group's own points say about its max-throughput ratio: how far the plateau extension moved it
from the grid's reading, and why it is outside the paper's range when it is."""
import numpy as np

from repro.serving.curves import ratio_text


def claim_note(group: dict, low: float, high: float) -> str:
    """A serving claim row's note: the ratio with its seed spread, how the plateau moved it, and why it is outside
    [low, high] when it is."""
    ratio = group["max_tput_ratio"]
    parts = [ratio_text(group), moved_text(group)]
    if ratio is not None and not low <= ratio <= high:
        parts.append(why_outside(group, low, high))
    return "; ".join(p for p in parts if p)


def why_outside(group: dict, low: float, high: float) -> str:
    """One line of measured mechanism: the plateaus, and at the top rate the preemptions, KV moves and
    rejections of each system (the sensitivity experiment's rows say which input moves the ratio how much)."""
    baseline = group["baseline"]
    plateau = group.get("max_tput_tok_s") or {}
    tops = {s: max(p["rate_per_s"] for p in group["points"] if p["system"] == s) for s in ("infinite-llm", baseline)}
    at_top = {s: [p for p in group["points"] if p["system"] == s and p["rate_per_s"] == top]
              for s, top in tops.items()}

    def mean(system, key):
        values = [p[key] for p in at_top[system] if p.get(key) is not None]
        return float(np.mean(values)) if values else 0.0

    side = "below" if (group["max_tput_ratio"] or 0) < low else "above"
    parts = [f"{side} the paper"]
    if plateau:
        parts.append(f"plateau {np.median(plateau['infinite-llm']):.0f} vs {np.median(plateau[baseline]):.0f} "
                     f"out tok/s")
    own, other = tops["infinite-llm"], tops[baseline]
    at = f"{own:.3g}" + ("" if own == other else f" vs {other:.3g}")
    parts.append(f"at {at} req/s: preemptions {mean('infinite-llm', 'num_preemptions'):.0f} vs "
                 f"{mean(baseline, 'num_preemptions'):.0f}, rejected {mean('infinite-llm', 'num_rejected'):.0f} vs "
                 f"{mean(baseline, 'num_rejected'):.0f}, Infinite-LLM moved {mean('infinite-llm', 'num_moved_blocks'):.0f}"
                 f" blocks, mean TTFT {mean('infinite-llm', 'mean_ttft_s'):.3g} vs {mean(baseline, 'mean_ttft_s'):.3g} s")
    return "; ".join(parts)


def moved_text(group: dict) -> str:
    """'grid 1.65x -> plateau 1.77x: infinite-llm +9% (2 rates added), vllm-s +0%': the ratio read off the grid
    alone and off the curves extended to their plateau, and how much each system's max throughput (median over
    seeds) gained past the grid; a curve still rising after the extension is named ('not reached')."""
    before = group.get("grid_max_tput_ratio")
    if before is None or group.get("max_tput_ratio") is None:
        return ""
    parts = []
    for system, record in group["plateau"].items():
        grid, plateau = group["grid_max_tput_tok_s"][system], group["max_tput_tok_s"][system]
        gain = np.median([p / g - 1 for p, g in zip(plateau, grid) if g > 0]) if any(grid) else 0.0
        added = len(record["added_rates_per_s"])
        text = f"{system} {gain:+.0%}" + (f" ({added} rate{'s' * (added > 1)} added)" if added else "")
        if not record["reached"]:
            text += f", not reached (top rise {record['top_rise']:+.0%})" if record["top_rise"] is not None \
                else ", not reached"
        parts.append(text)
    return f"grid {before:.2f}x -> plateau {group['max_tput_ratio']:.2f}x: " + ", ".join(parts)
