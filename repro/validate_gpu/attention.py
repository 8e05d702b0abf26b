"""Part 1: DistAttention's kernel grid against exact attention, and decode bandwidth against the peak and SDPA."""
import numpy as np
import torch

from reference_impl.kernels.equivalence import equivalence, make_case, split_and_merge
from repro.attention.bench import run_attention_bench
from repro.attention.cli import LAYOUTS

SEED = 0


def run(size, device: torch.device) -> dict:
    rows = []
    for backend, dtype, layout in size.check_cases:
        case = make_case(size.check_lengths, *LAYOUTS[layout], size.check_head_dim, 16, getattr(torch, dtype), SEED,
                         device)
        result = equivalence(case, *split_and_merge(case, np.random.default_rng(SEED), backend))
        rows.append({"backend": backend, "dtype": dtype, "layout": layout, "max_out_err": result.out_err,
                     "bound": result.out_bound, "max_lse_err": result.lse_err, "ok": result.ok})
    # The kernel a deployment runs: Triton on a GPU; on the CPU the interpreter's times would mean nothing
    backend = "triton" if device.type == "cuda" else "torch"
    bench = run_attention_bench(size.bench_models, size.bench_contexts, size.bench_batches,
                                dtype=getattr(torch, size.bench_dtype), backend=backend,
                                max_kv_bytes=int(size.bench_max_kv_gib * 2**30), device=device, seed=SEED)
    points = [p for p in bench.to_dict()["points"] if p["skipped"] is None]
    big = [p for p in points if p["kv_bytes"] >= 2**30] or points
    pct = [p["graph_pct_of_peak"] or p["pct_of_peak"] for p in big]
    vs_sdpa = [p["graph_speedup_vs_sdpa"] or p["speedup_vs_sdpa"] for p in big]
    return {"passed": all(r["ok"] for r in rows), "exactness": rows, "bandwidth": bench.to_dict(),
            "headline": {"cases_ok": sum(r["ok"] for r in rows), "cases": len(rows),
                         "points_over_1gib": sum(p["kv_bytes"] >= 2**30 for p in points),
                         "pct_of_peak_min": min(pct), "pct_of_peak_max": max(pct),
                         "speed_vs_sdpa_min": min(vs_sdpa), "speed_vs_sdpa_max": max(vs_sdpa),
                         "peak_gb_s": bench.peak_gb_s, "peak_source": bench.peak_source}}
