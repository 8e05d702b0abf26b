"""Cost-normalised throughput where the designs' hardware differs (Lamina's memory devices; pd-disaggregation's
split): each design's cluster priced at lamina Table 1's prices and counted in accelerators (a memory device counts
as one) by reference_impl/systems/pricing.py; its max throughput per $1,000 and
per accelerator, and its ratio to the group's baseline at the same price (`ratio_per_usd`) and at the same number
of accelerators (`ratio_per_accelerator`): the throughput ratio times the baseline's price (accelerators) over the
design's, so the per-seed median scales with it."""
from reference_impl.systems.pricing import accelerators, price_usd


def hardware(config) -> dict:
    """What `config`'s cluster holds and costs."""
    return {"num_gpus": config.num_gpus, "accelerators": accelerators(config), "price_usd": price_usd(config)}


def normalised(row: dict, own: dict, baseline: dict | None) -> dict:
    """The cost-normalised fields of a design's row (compare.py: `max_tput_median_tok_s`, `ratio`) on hardware
    `own`, against the baseline's hardware (None: no ratio)."""
    tput = row["max_tput_median_tok_s"]
    out = {"hardware": own, "max_tput_per_kusd_tok_s": 1e3 * tput / own["price_usd"],
           "max_tput_per_accelerator_tok_s": tput / own["accelerators"],
           "ratio_per_usd": None, "ratio_per_accelerator": None}
    if baseline is not None and row.get("ratio") is not None:
        out["ratio_per_usd"] = row["ratio"] * baseline["price_usd"] / own["price_usd"]
        out["ratio_per_accelerator"] = row["ratio"] * baseline["accelerators"] / own["accelerators"]
    return out
