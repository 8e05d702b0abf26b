"""`repro bench scale`: the simulator's cost as the cluster grows, at the same load per GPU (docs/simulator.md).

Trace 0 on LLaMA2-7B instances of one A100 each (Fig 10a's setting), REQUESTS_PER_GPU requests per GPU, for
Infinite-LLM and vLLM-M at LOADS times each system's saturation. Saturation is measured by the figures' own
probes (repro/serving/curves.py find_saturation, steady-state windows) on a PROBE_GPUS-GPU cluster serving
REQUESTS_PER_GPU requests per GPU, and scaled by the number of GPUs (the same rate per GPU at every size).

Each point runs `simulate` once in a fresh process (spawned, one point per process), which reports the CPU
seconds of that call and its peak resident memory (ru_maxrss, the interpreter and imports included; the same
process before the call is given beside it). Points run one at a time: a heavy simulation alone per core.
Then the gManager's own round at the same sizes (scale_gmanager.py).
"""
import os
import platform
import resource
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from functools import partial
from multiprocessing import get_context

from reference_impl.systems.registry import system_config
from repro.benchmarks.scale_cluster import GPU, MODEL, SEED, base_config
from repro.benchmarks.scale_gmanager import bench_gmanager
from repro.experiments.e2e import _requests
from repro.load import load_1m
from repro.serving.curves import CurveGroup, find_saturation
from repro.serving.sweep import in_process

TRACE = 0
SIZES = (32, 128, 512, 1024, 4096, 8192)
DEFAULT_MAX_GPUS = 1024  # 4096 and 8192 take tens of minutes: behind --max-gpus
SYSTEMS = ("infinite-llm", "vllm-m")
LOADS = (0.5, 1.5)
REQUESTS_PER_GPU = 31.25  # 1,000 requests on 32 GPUs, as the table
PROBE_GPUS = 32
# The goals (one core of this machine): GPUs, requests, CPU s, peak MiB (None: no memory goal). They run
# Infinite-LLM at GOAL_RATE_PER_GPU, the rate of the table the goals were set against.
GOALS = ((1024, 100_000, 90.0, None), (8192, 1_000_000, 900.0, 8 * 1024.0))
GOAL_RATE_PER_GPU = 2.0


@dataclass(frozen=True, slots=True)
class ScalePoint:
    num_gpus: int
    system: str
    load: float | None  # of the system's saturation; None: a goal point, at GOAL_RATE_PER_GPU
    rate_per_s: float
    num_requests: int
    cpu_s: float  # of the simulate call
    cpu_s_per_1k_requests: float
    maxrss_mib: float  # the point's process at its peak
    rss_before_mib: float  # the same process before the call (interpreter, imports, the requests)
    num_events: int  # steps (decode/prefill) recorded
    num_finished: int


def num_requests(num_gpus: int) -> int:
    return int(round(REQUESTS_PER_GPU * num_gpus))


def saturation_per_gpu(log, trace: int = TRACE, requests_per_gpu: float = REQUESTS_PER_GPU,
                       probe_fraction: float = 1.0, systems=SYSTEMS) -> dict[str, float]:
    """Each system's saturation rate per GPU, from the figures' probes on a PROBE_GPUS-GPU cluster."""
    make = partial(_requests, trace, int(round(requests_per_gpu * PROBE_GPUS)), "fitted")
    group = CurveGroup({}, base_config(PROBE_GPUS), make, systems, f"scale probe trace {trace} {PROBE_GPUS} GPUs",
                       probe_fraction=probe_fraction)
    sweep = in_process(log)
    sweep.run(find_saturation(group, SEED, sweep))
    return {s: rate / PROBE_GPUS for s, rate in group.saturation_per_s.items()}


def run_point(num_gpus: int, system: str, load: float | None, rate_per_s: float,
              n: int | None = None) -> ScalePoint:
    """One point of `n` requests (default: REQUESTS_PER_GPU per GPU), in the process that calls it (the benchmark
    calls it in a fresh one)."""
    from reference_impl.systems.run import simulate

    requests = _requests(TRACE, n or num_requests(num_gpus), "fitted", rate_per_s, SEED)
    config = system_config(system, base_config(num_gpus))
    rss_before = _maxrss_mib()
    start = time.process_time()
    result = simulate(config, requests)
    cpu_s = time.process_time() - start
    return ScalePoint(num_gpus, system, load, rate_per_s, len(requests), cpu_s, 1000 * cpu_s / len(requests),
                      _maxrss_mib(), rss_before, result.num_steps, result.summary().num_finished)


def _maxrss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def bench(log, sizes=None, max_gpus: int = DEFAULT_MAX_GPUS) -> dict:
    """Every (size, system, load) point up to `max_gpus` GPUs (or `sizes`), smallest first; the JSON record."""
    sizes = [g for g in (sizes or SIZES) if g <= max_gpus]
    saturation = saturation_per_gpu(log)
    log("saturation per GPU: " + ", ".join(f"{s} {r:.3f}/s" for s, r in saturation.items()))
    points = []
    for num_gpus in sizes:
        for system in SYSTEMS:
            for load in LOADS:
                point = _fresh_process(run_point, num_gpus, system, load, load * saturation[system] * num_gpus)
                log(f"{num_gpus:5d} GPUs {system:12s} {load}x: {point.cpu_s:8.1f} CPU s, "
                    f"{point.cpu_s_per_1k_requests:6.2f} s per 1000 requests, {point.maxrss_mib:7.0f} MiB peak")
                points.append(asdict(point))
    rounds = bench_gmanager(log, max(sizes))
    return {"model": MODEL, "gpu": GPU, "trace_id": TRACE, "requests_per_gpu": REQUESTS_PER_GPU,
            "saturation": {"per_gpu_per_s": saturation, "probe_gpus": PROBE_GPUS,
                           "method": "repro/serving/curves.py find_saturation (steady-state probes)"},
            "machine": _machine(),
            "points": points, "gmanager_rounds": rounds}


def _fresh_process(fn, *args):
    with ProcessPoolExecutor(1, mp_context=get_context("spawn")) as pool:
        return pool.submit(fn, *args).result()


def bench_goals(log, max_gpus: int = max(g for g, *_ in GOALS)) -> dict:
    """The issue's goal points up to `max_gpus`: Infinite-LLM, GOAL_RATE_PER_GPU, each in a fresh process; each
    with its CPU s and memory goal and whether it was met (the JSON record)."""
    rows = []
    for num_gpus, n, cpu_goal_s, mem_goal_mib in GOALS:
        if num_gpus > max_gpus:
            continue
        rate = GOAL_RATE_PER_GPU * num_gpus
        point = _fresh_process(run_point, num_gpus, "infinite-llm", None, rate, n)
        met = point.cpu_s <= cpu_goal_s and (mem_goal_mib is None or point.maxrss_mib <= mem_goal_mib)
        log(f"goal {num_gpus} GPUs, {n:,} requests: {point.cpu_s:.0f} CPU s (goal {cpu_goal_s:.0f}), "
            f"{point.maxrss_mib:.0f} MiB peak{'' if mem_goal_mib is None else f' (goal {mem_goal_mib:.0f})'}: "
            f"{'met' if met else 'missed'}")
        rows.append(dict(asdict(point), cpu_goal_s=cpu_goal_s, mem_goal_mib=mem_goal_mib, met=met))
    return {"model": MODEL, "gpu": GPU, "trace_id": TRACE, "system": "infinite-llm",
            "rate_per_gpu_per_s": GOAL_RATE_PER_GPU, "machine": _machine(), "points": rows}


def _machine() -> dict:
    return {"cpus": os.cpu_count(), "python": platform.python_version(), "load_1m": load_1m()}


def goals_table(result: dict) -> str:
    """The markdown table of the goal points: CPU s and peak memory against each goal."""
    lines = ["| GPUs | requests | CPU s (goal) | ms per request | peak MiB (goal) | met |", "|" + "---|" * 6]
    for r in result["points"]:
        mem_goal = "" if r["mem_goal_mib"] is None else f" ({r['mem_goal_mib']:.0f})"
        lines.append(f"| {r['num_gpus']} | {r['num_requests']:,} | {r['cpu_s']:.0f} ({r['cpu_goal_s']:.0f}) "
                     f"| {r['cpu_s_per_1k_requests']:.2f} | {r['maxrss_mib']:.0f}{mem_goal} | "
                     f"{'yes' if r['met'] else 'no'} |")
    return "\n".join(lines)


def gmanager_table(result: dict) -> str:
    """The markdown table of the gManager's round per size: CPU ms by part, entries, heartbeat MB/s."""
    lines = ["| instances | entries | heartbeats/round | intake ms | plan ms (recalls + Alg. 1) | DGFM ms | round ms "
             "| full-state intake ms | heartbeat MB/s |", "|" + "---|" * 9]
    for r in result["gmanager_rounds"]:
        lines.append(f"| {r['num_instances']} | {r['entries']:,.0f} | {r['heartbeats']:,.0f} | {1e3 * r['intake_s']:.2f} "
                     f"| {1e3 * r['plan_s']:.2f} | {1e3 * r['dgfm_s']:.2f} | {1e3 * r['round_s']:.2f} "
                     f"| {1e3 * r['full_intake_s']:.2f} | {r['heartbeat_bytes_per_s'] / 1e6:.3f} |")
    return "\n".join(lines)


def table(result: dict) -> str:
    """The markdown table of docs/simulator.md: CPU s per 1,000 requests and peak MiB per size and system."""
    cols = [(s, load) for s in SYSTEMS for load in LOADS]
    head = "| GPUs | requests | " + " | ".join(f"{s} {load}x: s/1k req, MiB" for s, load in cols) + " |"
    lines = [head, "|" + "---|" * (len(cols) + 2)]
    by = {(p["num_gpus"], p["system"], p["load"]): p for p in result["points"]}
    for g in sorted({p["num_gpus"] for p in result["points"]}):
        cells = []
        for s, load in cols:
            p = by.get((g, s, load))
            cells.append("" if p is None else f"{p['cpu_s_per_1k_requests']:.2f}, {p['maxrss_mib']:.0f}")
        lines.append(f"| {g} | {num_requests(g):,} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
