"""Shared by the serving experiments (e2e, e2e-datasets, sensitivity): one simulated point, what a point to run
is (PointTask, its requests made where it runs: RequestSpec), and the parameters they share. Where points run and
which are already done: repro/serving/sweep.py. The curve method (saturation search, rate grid, seeds, plateau)
is in curves.py; the summary and point record are reference_impl/serving/'s, for every backend."""
import os
import time
from dataclasses import dataclass, replace

import numpy as np

from reference_impl.calibration.perf_model import InstanceLoad, causal_prefill_pairs, step_time_s
from reference_impl.serving.points import ServingPoint
from reference_impl.sim.config import SimConfig, blocks_per_instance, perf_model
from reference_impl.systems.run import simulate
from reference_impl.systems.registry import system_config
from repro.framework.params import parse_params
from repro.serving.keys import requests_sha256
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
class RequestSpec:
    """A point's requests, made where the point runs: the first max(`min_count`, `fraction` of them) of
    `make(rate_per_s, seed)` (a picklable callable; a probe serves a prefix of a point's requests)."""
    make: object
    rate_per_s: float
    seed: int
    fraction: float = 1.0
    min_count: int = 0

    def build(self) -> tuple:
        requests = self.make(self.rate_per_s, self.seed)
        return tuple(requests[:max(self.min_count, int(self.fraction * len(requests)))])


def requests_of(requests) -> tuple:
    """A task's requests: built from a RequestSpec, or the tuple given."""
    return requests.build() if isinstance(requests, RequestSpec) else tuple(requests)


@dataclass(frozen=True, slots=True)
class PointTask:
    """One simulated point to run: a system on a cluster, its requests (a RequestSpec, or a tuple), and the label
    its log line carries. `runner` (a picklable callable taking the task, its requests built) replaces run_point,
    e.g. for a calibration variant. `steady_only`: only the point's steady-state rate is read (a probe), so a
    simulation may stop at the end of that window (run_point). `answer` (called where the run is driven, before
    the point is run): the point from points already known, or None to run it."""
    system: str
    base: SimConfig
    requests: object
    rate_per_s: float
    label: str
    seed: int = 0
    runner: object = None
    steady_only: bool = False
    answer: object = None


def request_cost(requests) -> float:
    """A rough cost for handing out the longest points first: simulated steps grow with tokens."""
    return float(sum(r.prompt_len + 4 * r.output_len for r in requests))


def run_job(job: tuple) -> dict:
    """Where a point runs: (task, sha256 of its requests or None) -> {"point", "cpu_s": this process's CPU seconds
    for it}; the requests are built here and checked against the driver's hash (a node with other code or data
    fails the point instead of its numbers)."""
    start = time.process_time()
    task, want_sha = job
    requests = requests_of(task.requests)
    if want_sha is not None and requests_sha256(requests) != want_sha:
        raise RuntimeError(f"{task.label} {task.system} rate {task.rate_per_s}: requests built here differ from "
                           f"the driver's (other code or data on this node?)")
    task = replace(task, requests=requests)
    if task.runner is not None:
        point = task.runner(task)
    else:
        point = run_point(task.system, task.base, task.requests, task.rate_per_s, task.seed,
                          steady_only=task.steady_only)
    return {"point": point, "cpu_s": time.process_time() - start}


def run_call(fn) -> dict:
    """Where a job runs (Sweep.job): {"point": fn(), "cpu_s": this process's CPU seconds for it}."""
    start = time.process_time()
    result = fn()
    return {"point": result, "cpu_s": time.process_time() - start}


def log_job(log, label: str, result, where: str | None = None) -> None:
    log(f"  {label}{f' ({where})' if where else ''}")


def log_point(log, task: PointTask, p: dict, where: str | None = None) -> None:
    """One line per point; `where` in place of its wall time when it was not run for this line."""
    where = where or f"{p['wall_s']:.1f} s"
    log(f"  {task.label} {task.system:<13} seed {task.seed} rate {task.rate_per_s:9.4g}/s  "
        f"{p['steady_output_tok_s']:9.1f} steady out tok/s  finished {p['num_finished']}/{p['num_requests']}"
        f"{' by the window end' if task.steady_only else ''}  ({where})")


def typed(name: str, declared: tuple, params):
    """`params` with its --param values typed and defaulted (run_and_save does this already; a direct call of
    an experiment's run with raw strings gets the same values)."""
    return replace(params, extra=parse_params(name, declared, params.extra, params.backend))


def default_workers(params) -> int:
    """Processes for the simulated points (or CPUs of a private Ray): one per core for full runs, one for --quick
    (tests run those)."""
    workers = params.extra.get("workers")
    if workers is not None:
        return max(1, int(workers))
    return 1 if params.quick else max(1, len(os.sched_getaffinity(0)))
