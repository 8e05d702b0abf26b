"""Shared by the serving experiments (e2e, e2e-datasets): rate grids, one simulated point, curve summaries."""
import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from multiprocessing import get_context

import numpy as np

from reference_impl.backends.sim import simulate
from reference_impl.errors import InputError
from reference_impl.perf_model import InstanceLoad, causal_prefill_pairs, step_time_s
from reference_impl.sim.config import SimConfig, blocks_per_instance, perf_model
from reference_impl.sim.systems import system_config
from workloads import generate
from workloads.generate import SourceOptions

LINK_DEFAULT = "inter-node"  # Vidur's measured A100 DGX send/recv; the paper's "125MB/s" is a sweep point


@dataclass(frozen=True, slots=True)
class Point:
    system: str
    rate_per_s: float
    num_requests: int
    num_finished: int
    num_rejected: int
    num_unfinished: int
    output_tok_s: float
    window_tok_s: float
    total_tok_s: float
    mean_norm_latency_s: float | None
    mean_latency_s: float | None
    mean_ttft_s: float | None
    makespan_s: float
    num_preemptions: int
    num_moved_blocks: int
    sim_wall_s: float


def workload(*, trace_id=None, dataset_id=None, num_requests: int, rate_per_s: float, seed: int, source: str):
    return generate(trace_id=trace_id, dataset_id=dataset_id, num_requests=num_requests, rate_per_s=rate_per_s,
                    seed=seed, options=SourceOptions(source=source))


def nominal_rate_per_s(config: SimConfig, requests) -> float:
    """A rough saturation rate of the cluster for these lengths, from the cost model alone: per instance, a
    request costs its prefill plus its share of decode steps at the largest batch that fits. Only a scale
    for the rate grid (the same rates are used for every system)."""
    model = perf_model(config)
    prompt = float(np.mean([r.prompt_len for r in requests]))
    output = float(np.mean([r.output_len for r in requests]))
    context = prompt + output / 2
    capacity = blocks_per_instance(config) * config.block_size
    batch = int(max(1, min(config.max_batch_size, capacity // max(1.0, context))))
    prefill_s = step_time_s(model, InstanceLoad(batch_size=0, attn_kv_tokens=0, prefill_tokens=int(prompt),
                                                prefill_attn_pairs=causal_prefill_pairs(int(prompt))))
    decode_s = step_time_s(model, InstanceLoad(batch_size=batch, attn_kv_tokens=int(batch * context)))
    return config.num_instances / (prefill_s + output * decode_s / batch)


def run_point(system: str, base: SimConfig, requests, rate_per_s: float) -> Point:
    import time

    config = system_config(system, base)
    start = time.perf_counter()
    result = simulate(config, requests)
    wall_s = time.perf_counter() - start
    s = result.summary()
    return Point(system, rate_per_s, s.num_requests, s.num_finished, s.num_rejected, s.num_unfinished,
                 s.output_tok_s, s.window_tok_s, s.total_tok_s, s.mean_norm_latency_s, s.mean_latency_s, s.mean_ttft_s,
                 s.makespan_s, sum(r.num_preemptions for r in result.requests), result.num_moved_blocks,
                 round(wall_s, 3))


@dataclass(frozen=True, slots=True)
class PointTask:
    """One simulated point to run: a system on a cluster, the requests, and the label its log line carries."""
    system: str
    base: SimConfig
    requests: tuple
    rate_per_s: float
    label: str


def curve_tasks(systems, base: SimConfig, make_requests, rates_per_s, label: str) -> list[PointTask]:
    """Every system at every rate on the same requests (lengths fixed by the seed, arrivals scaled)."""
    tasks = []
    for rate in rates_per_s:
        requests = tuple(make_requests(rate))
        tasks += [PointTask(system, base, requests, rate, label) for system in systems]
    return tasks


def _run_task(task: PointTask) -> Point:
    return run_point(task.system, task.base, task.requests, task.rate_per_s)


def run_tasks(tasks: list[PointTask], log, workers: int = 1) -> list[dict]:
    """The points of `tasks`, in order. workers > 1 runs them in that many processes: each point is a
    deterministic simulation, so the numbers are the same whatever the count (only sim_wall_s differs)."""
    def report(task, p):
        log(f"  {task.label} {task.system:<13} rate {task.rate_per_s:8.4f}/s  {p.output_tok_s:9.1f} out tok/s  "
            f"finished {p.num_finished}/{p.num_requests}  ({p.sim_wall_s:.1f} s)")
        return asdict(p)

    if workers <= 1 or len(tasks) <= 1:
        return [report(t, _run_task(t)) for t in tasks]
    # spawn, not fork: the parent has torch (and its thread pools) loaded
    with ProcessPoolExecutor(min(workers, len(tasks)), mp_context=get_context("spawn")) as pool:
        return [report(t, p) for t, p in zip(tasks, pool.map(_run_task, tasks))]


def default_workers(params) -> int:
    """Processes for the simulated points: one per core for full runs, one for --quick (tests run those)."""
    return param(params, "workers", int, 1 if params.quick else max(1, len(os.sched_getaffinity(0))))


def max_throughput_ratio(points: list[dict], system: str, baseline: str) -> float | None:
    best = {s: max((p["output_tok_s"] for p in points if p["system"] == s), default=0.0) for s in (system, baseline)}
    return best[system] / best[baseline] if best[baseline] > 0 else None


def rate_grid(nominal: float, multipliers) -> list[float]:
    return [float(f"{nominal * m:.4g}") for m in multipliers]


def param(params, key: str, cast, default):
    raw = params.extra.get(key)
    if raw is None:
        return default
    try:
        return cast(raw)
    except (TypeError, ValueError):
        raise InputError(f"--param {key}={raw!r} is not a valid {cast.__name__}") from None
