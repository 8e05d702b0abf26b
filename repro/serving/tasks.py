"""Shared by the serving experiments (e2e, e2e-datasets, sensitivity): one simulated point, the process pool
that runs many, and the parameters they share. The curve method (saturation search, rate grid, seeds, plateau)
is in curves.py; the summary and point record are reference_impl/serving/'s, for every backend."""
import os
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing import get_context

import numpy as np

from reference_impl.perf_model import InstanceLoad, causal_prefill_pairs, step_time_s
from reference_impl.serving.points import ServingPoint
from reference_impl.sim.config import SimConfig, blocks_per_instance, perf_model
from reference_impl.sim.simulator import simulate
from reference_impl.sim.systems import system_config
from repro.progress import live_bar
from workloads import generate
from workloads.generate import SourceOptions


def workload(*, trace_id=None, dataset_id=None, num_requests: int, rate_per_s: float, seed: int, source: str):
    return generate(trace_id=trace_id, dataset_id=dataset_id, num_requests=num_requests, rate_per_s=rate_per_s,
                    seed=seed, options=SourceOptions(source=source))


def nominal_rate_per_s(config: SimConfig, requests) -> float:
    """A rough saturation rate from the cost model alone (mean prompt and output, the largest batch that fits).
    It overshoots on heavy-tailed traces (prefill attention is quadratic), so it only starts the measured
    saturation search of repro/serving/curves.py."""
    model = perf_model(config)
    prompt = float(np.mean([r.prompt_len for r in requests]))
    output = float(np.mean([r.output_len for r in requests]))
    context = prompt + output / 2
    capacity = blocks_per_instance(config) * config.engine.block_size
    batch = int(max(1, min(config.engine.max_batch_size, capacity // max(1.0, context))))
    prefill_s = step_time_s(model, InstanceLoad(batch_size=0, attn_kv_tokens=0, prefill_tokens=int(prompt),
                                                prefill_attn_pairs=causal_prefill_pairs(int(prompt))))
    decode_s = step_time_s(model, InstanceLoad(batch_size=batch, attn_kv_tokens=int(batch * context)))
    return config.engine.num_instances / (prefill_s + output * decode_s / batch)


def run_point(system: str, base: SimConfig, requests, rate_per_s: float, seed: int = 0, *,
              steady_only: bool = False) -> dict:
    """One simulated point: `system` (a policy over `base`) serving `requests`; the schema's point record.
    `steady_only`: the run stops at the end of its steady-state window (simulate), for a point of which only
    `steady_output_tok_s` is read."""
    config = system_config(system, base)
    start = time.perf_counter()
    result = simulate(config, requests, steady_only=steady_only)
    return ServingPoint.of_result(system, rate_per_s, result, wall_s=time.perf_counter() - start,
                                  seed=seed).to_dict()


@dataclass(frozen=True, slots=True)
class PointTask:
    """One simulated point to run: a system on a cluster, the requests, and the label its log line carries.
    `runner` (a picklable callable taking the task) replaces run_point, e.g. for a calibration variant.
    `steady_only`: only the point's steady-state rate is read (a probe), so a simulation may stop at the end of
    that window (run_point)."""
    system: str
    base: SimConfig
    requests: tuple
    rate_per_s: float
    label: str
    seed: int = 0
    runner: object = None
    steady_only: bool = False

    @property
    def cost(self) -> float:
        """A rough cost for scheduling the longest points first: simulated steps grow with tokens."""
        return float(sum(r.prompt_len + 4 * r.output_len for r in self.requests))


def _run_task(task: PointTask) -> dict:
    if task.runner is not None:
        return task.runner(task)
    return run_point(task.system, task.base, task.requests, task.rate_per_s, task.seed, steady_only=task.steady_only)


def _log_point(log, task: PointTask, p: dict) -> None:
    log(f"  {task.label} {task.system:<13} seed {task.seed} rate {task.rate_per_s:9.4g}/s  "
        f"{p['steady_output_tok_s']:9.1f} steady out tok/s  finished {p['num_finished']}/{p['num_requests']}"
        f"{' by the window end' if task.steady_only else ''}  ({p['wall_s']:.1f} s)")


@contextmanager
def point_pool(workers: int):
    """A process pool for run_tasks (None for one worker: the points run in this process)."""
    if workers <= 1:
        yield None
        return
    # spawn, not fork: the parent has torch (and its thread pools) loaded
    with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool:
        yield pool


def run_tasks(tasks: list[PointTask], log, pool=None) -> list[dict]:
    """The points of `tasks`, in order; in `pool` (point_pool) when given, longest first. Each point is a
    deterministic simulation, so the numbers do not depend on the pool (only wall_s differs). A bar on
    stderr counts the points done (repro/progress.py)."""
    out = [None] * len(tasks)
    with live_bar(desc="simulated points", total=len(tasks), unit="point") as bar:
        if pool is None:
            done = ((i, _run_task(task)) for i, task in enumerate(tasks))
        else:
            order = sorted(range(len(tasks)), key=lambda i: -tasks[i].cost)
            futures = {pool.submit(_run_task, tasks[i]): i for i in order}
            done = ((futures[f], f.result()) for f in as_completed(futures))  # logged as they finish
        for i, point in done:
            out[i] = point
            _log_point(log, tasks[i], point)
            bar.update(1)
    return out


def typed(name: str, declared: tuple, params):
    """`params` with its --param values typed and defaulted (run_and_save does this already; a direct call of
    an experiment's run with raw strings gets the same values)."""
    from dataclasses import replace

    from repro.experiments.params import parse_params
    return replace(params, extra=parse_params(name, declared, params.extra, params.backend))


def default_workers(params) -> int:
    """Processes for the simulated points: one per core for full runs, one for --quick (tests run those)."""
    workers = params.extra.get("workers")
    if workers is not None:
        return max(1, int(workers))
    return 1 if params.quick else max(1, len(os.sched_getaffinity(0)))
