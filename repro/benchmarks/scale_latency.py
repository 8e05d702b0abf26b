"""Does the gManager's round latency matter? (`repro bench scale --latency FILE`; docs/simulator.md)

On the scale experiment's long trace (LONG_TRACE, its requests per GPU), where rounds move KV (on trace 0 they move
none), Infinite-LLM serves LOAD x its saturation per GPU (the figures' probes on PROBE_GPUS GPUs) three times per
size and seed: the round's decisions at once, after the round's CPU time measured at that size (`round_s` of a
`repro bench scale` record), and after the largest round measured there, as a bound. Each run stops at its
steady-state window's end; its steady-state output rate is the max throughput the figures read.
"""
from dataclasses import asdict, dataclass, replace

from reference_impl.systems.run import simulate
from reference_impl.systems.registry import system_config
from repro.benchmarks.scale import SEED, _machine, base_config, saturation_per_gpu
from repro.experiments.e2e import _requests
from repro.experiments.scale.experiment import FULL, LONG_TRACE
from repro.serving.curves import LONG_PROBE_FRACTION

SIZES = (32, 128, 512, 1024)
SEEDS = (SEED, SEED + 1, SEED + 2)
LOAD = 1.5  # of the saturation: past it, the steady-state rate is the max throughput
REQUESTS_PER_GPU = FULL["long_requests_per_gpu"]


@dataclass(frozen=True, slots=True)
class LatencyRow:
    num_gpus: int
    seed: int
    round_s: float  # the measured round at this size
    bound_s: float  # the largest measured round
    tok_s: float  # steady-state output tok/s, decisions at once
    tok_s_round: float  # decisions round_s later
    tok_s_bound: float  # decisions bound_s later
    moved_blocks: int  # rBlocks the rounds moved, decisions at once


def steady_run(num_gpus: int, rate_per_s: float, seed: int, latency_s: float):
    config = replace(system_config("infinite-llm", base_config(num_gpus)), gmanager_latency_s=latency_s)
    requests = _requests(LONG_TRACE, int(round(REQUESTS_PER_GPU * num_gpus)), "fitted", rate_per_s, seed)
    return simulate(config, requests, steady_only=True)


def latency_check(log, scale: dict, sizes=SIZES, seeds=SEEDS) -> dict:
    """The rows at every size of `sizes` that `scale` (a `repro bench scale` record) has a round for."""
    rounds = {r["num_instances"]: r["round_s"] for r in scale["gmanager_rounds"]}
    bound_s = max(rounds.values())
    per_gpu = saturation_per_gpu(log, LONG_TRACE, REQUESTS_PER_GPU, LONG_PROBE_FRACTION, ("infinite-llm",))
    rows = []
    for num_gpus in (g for g in sizes if g in rounds):
        rate = LOAD * per_gpu["infinite-llm"] * num_gpus
        for seed in seeds:
            runs = [steady_run(num_gpus, rate, seed, latency) for latency in (0.0, rounds[num_gpus], bound_s)]
            tok_s = [r.summary().steady_output_tok_s for r in runs]
            rows.append(LatencyRow(num_gpus, seed, rounds[num_gpus], bound_s, *tok_s, runs[0].num_moved_blocks))
            log(f"{num_gpus:5d} GPUs seed {seed}: {tok_s[0]:10.1f} tok/s at once, x{tok_s[1] / tok_s[0]:.4f} after "
                f"{1e3 * rounds[num_gpus]:.1f} ms, x{tok_s[2] / tok_s[0]:.4f} after {1e3 * bound_s:.0f} ms")
    return {"trace_id": LONG_TRACE, "requests_per_gpu": REQUESTS_PER_GPU, "load": LOAD,
            "saturation_per_gpu_per_s": per_gpu["infinite-llm"], "machine": _machine(),
            "rows": [asdict(r) for r in rows]}


def latency_table(result: dict) -> str:
    """Per size: the round's latency, rBlocks moved, and the throughput with the latency (and with the bound) over
    at once, min-max over seeds."""
    lines = ["| GPUs | round ms | rBlocks moved | tput, decisions a round later / at once | "
             "after the largest round / at once |", "|---|---|---|---|---|"]
    for g in dict.fromkeys(r["num_gpus"] for r in result["rows"]):
        mine = [r for r in result["rows"] if r["num_gpus"] == g]
        spans = []
        for key in ("tok_s_round", "tok_s_bound"):
            ratios = [r[key] / r["tok_s"] for r in mine]
            spans.append(f"{min(ratios):.4f}-{max(ratios):.4f}")
        moved = min(r["moved_blocks"] for r in mine)
        lines.append(f"| {g} | {1e3 * mine[0]['round_s']:.1f} | {moved:,}+ | {spans[0]} | {spans[1]} |")
    return "\n".join(lines)
