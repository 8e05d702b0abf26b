"""What a serving group's own points say when its max-throughput ratio is outside the paper's range."""
import numpy as np


def why_outside(group: dict, low: float, high: float) -> str:
    """One line of measured mechanism: the plateaus, and at the top rate the preemptions, KV moves and
    rejections of each system (the sensitivity experiment's rows say which input moves the ratio how much)."""
    baseline = group["baseline"]
    plateau = group.get("max_tput_tok_s") or {}
    top = max(group["rates_per_s"])
    at_top = {s: [p for p in group["points"] if p["system"] == s and p["rate_per_s"] == top]
              for s in ("infinite-llm", baseline)}

    def mean(system, key):
        values = [p[key] for p in at_top[system] if p.get(key) is not None]
        return float(np.mean(values)) if values else 0.0

    side = "below" if (group["max_tput_ratio"] or 0) < low else "above"
    parts = [f"{side} the paper"]
    if plateau:
        parts.append(f"plateau {np.median(plateau['infinite-llm']):.0f} vs {np.median(plateau[baseline]):.0f} "
                     f"out tok/s")
    parts.append(f"at {top:.3g} req/s: preemptions {mean('infinite-llm', 'num_preemptions'):.0f} vs "
                 f"{mean(baseline, 'num_preemptions'):.0f}, rejected {mean('infinite-llm', 'num_rejected'):.0f} vs "
                 f"{mean(baseline, 'num_rejected'):.0f}, Infinite-LLM moved {mean('infinite-llm', 'num_moved_blocks'):.0f}"
                 f" blocks, mean TTFT {mean('infinite-llm', 'mean_ttft_s'):.3g} vs {mean(baseline, 'mean_ttft_s'):.3g} s")
    return "; ".join(parts)
