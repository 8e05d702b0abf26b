"""`repro bench sweep`: what running simulated points on Ray costs beside the local pool, and what a cluster would
give the figure set.

1. Overhead: the same small sweep (OVERHEAD_SWEEP: 48 points of trace 0) through each executor with 1 and 2
   workers, twice on the same executor (the second run warm: workers started and imports done): points per
   second, calls made (Ray hands short points out several to a call: executors.BATCH_S), and wall x workers /
   points - mean CPU of a point (on a loaded machine this also holds the CPU the workers did not get). Then
   EMPTY_POINTS points that simulate nothing (empty_point) one to a call on the warm executor: wall x workers /
   points is what the executor costs a call (handing it out, shipping, scheduling, the result back), set beside
   the median simulated point, alone and shared by the points of a call in the warm run. Every run's points must
   equal this process's.
2. The task graph of the quick figure set: GRAPH_EXPERIMENTS --quick run here with their graphs recorded (each
   point's CPU seconds and what it waited for), the figure set's other simulated experiments one node each
   (their CPU time), all experiments independent. From it, by list scheduling as the sweep hands out
   points, the predicted wall time on CORES (each point costed with Ray's empty-point time measured in 1), beside
   the bounds (critical path; total CPU over the cores) and the critical path named.
"""
import json
import os
import statistics
import tempfile
import time
from dataclasses import replace
from functools import partial
from pathlib import Path

from reference_impl.sim.config import sim_engine
from reference_impl.systems.registry import cluster
from repro.benchmarks.schedule import critical_path, schedule_s
from repro.experiments.e2e import GPU, _requests
from repro.framework.base import RunParams
from repro.framework.registry import get_experiment
from repro.load import load_1m
from repro.serving.executors import LocalPool, RayCluster
from repro.serving.sweep import SPECULATE_AHEAD, Sweep, in_process
from repro.serving.tasks import PointTask, RequestSpec

CORES = (16, 64, 256)
GRAPH_EXPERIMENTS = ("e2e", "e2e-datasets", "sensitivity", "dgfm", "context-length")
SINGLE_EXPERIMENTS = ("perf-model", "motivation", "migration", "lamina")
EMPTY_POINTS = 400
OVERHEAD_SWEEP = dict(trace_id=0, num_requests=200, rates_per_s=(2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0),
                      systems=("infinite-llm", "vllm-m"), seeds=(0, 1, 2))


def overhead_tasks() -> list:
    s = OVERHEAD_SWEEP
    base = cluster("llama2-7b", GPU, 4, engine=sim_engine(seed=0))
    make = partial(_requests, s["trace_id"], s["num_requests"], "fitted")
    return [PointTask(system, base, RequestSpec(make, rate, seed), rate, "bench", seed)
            for rate in s["rates_per_s"] for system in s["systems"] for seed in s["seeds"]]


def empty_point(task) -> dict:
    """A point that simulates nothing: what remains of its time is the executor's."""
    return {"system": task.system, "rate_per_s": task.rate_per_s, "seed": task.seed, "steady_output_tok_s": 0.0,
            "num_finished": 0, "num_requests": len(task.requests), "wall_s": 0.0}


def empty_tasks(tasks: list) -> list:
    return [replace(tasks[i % len(tasks)], runner=empty_point, seed=i) for i in range(EMPTY_POINTS)]


def _plain(points: list[dict]) -> list[dict]:
    return [{k: v for k, v in p.items() if k != "wall_s"} for p in points]


def measure_executor(kind: str, workers: int, tasks: list, reference: list[dict], log) -> dict:
    """Two runs of `tasks` on one executor of `kind` (pool | ray) with `workers` slots."""
    start = time.perf_counter()
    executor = LocalPool(workers) if kind == "pool" else RayCluster("local", workers)
    started_s = time.perf_counter() - start
    runs = []
    try:
        for attempt in ("cold", "warm"):
            sweep = Sweep(executor, None, lambda line: None)
            load, t0 = load_1m(), time.perf_counter()
            points = sweep.run(sweep.points(tasks))
            wall = time.perf_counter() - t0
            cpu = [n.cpu_s for n in sweep.graph.nodes]
            if _plain(points) != _plain(reference):
                raise RuntimeError(f"{kind} with {workers} workers gave other points than this process")
            runs.append({"run": attempt, "wall_s": round(wall, 3), "points_per_s": round(len(tasks) / wall, 2),
                         "calls": sweep.calls,
                         "point_cpu_s_median": round(statistics.median(cpu), 4),
                         "point_cpu_s_mean": round(statistics.mean(cpu), 4),
                         "overhead_per_point_s": round(wall * workers / len(tasks) - statistics.mean(cpu), 4),
                         "loadavg_1m": load})
            log(f"{kind:<4} {workers} workers {attempt}: {wall:6.2f} s, {len(tasks) / wall:6.1f} points/s, "
                f"{runs[-1]['overhead_per_point_s'] * 1e3:6.1f} ms a point beyond its "
                f"{runs[-1]['point_cpu_s_mean'] * 1e3:.0f} ms of CPU (load {load})")
        empty = empty_tasks(tasks)
        executor.batch_s = 0.0  # one call a point: what a call costs
        sweep = Sweep(executor, None, lambda line: None)
        t0 = time.perf_counter()
        sweep.run(sweep.points(empty))
        per_point = (time.perf_counter() - t0) * workers / len(empty)
        log(f"{kind:<4} {workers} workers: {per_point * 1e3:.2f} ms a call of a point that simulates nothing")
    finally:
        executor.close()
    return {"executor": kind, "workers": workers, "start_s": round(started_s, 3), "runs": runs,
            "empty_point_s": round(per_point, 5)}


def measure_overheads(log) -> dict:
    tasks = overhead_tasks()
    here = in_process(lambda line: None)
    t0 = time.perf_counter()
    reference = here.run(here.points(tasks))
    here_s = time.perf_counter() - t0
    cpu = [n.cpu_s for n in here.graph.nodes]
    log(f"this process: {here_s:.2f} s for {len(tasks)} points, median point {statistics.median(cpu) * 1e3:.0f} ms")
    rows = [measure_executor(kind, workers, tasks, reference, log) for kind in ("pool", "ray") for workers in (1, 2)]
    median = statistics.median(cpu)
    for row in rows:
        row["empty_point_share_of_median"] = round(row["empty_point_s"] / median, 4)
        warm = row["runs"][-1]  # short points batched: the cost of a call shared by the points it carried
        row["overhead_share_of_median_batched"] = round(row["empty_point_s"] * warm["calls"] / len(tasks) / median, 4)
    return {"sweep": {**OVERHEAD_SWEEP, "points": len(tasks)}, "this_process_s": round(here_s, 3),
            "point_cpu_s_median": round(median, 4), "empty_points": EMPTY_POINTS, "executors": rows}


def record_graphs(log, ahead: int = SPECULATE_AHEAD) -> list[dict]:
    """The quick figure set's nodes: the point graphs of GRAPH_EXPERIMENTS, one node per SINGLE_EXPERIMENTS. The
    climbs submit `ahead` doublings before the rule asks for them, as on a cluster of CORES (sweep.default_ahead):
    those that turn out unneeded are nodes too."""
    nodes = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in GRAPH_EXPERIMENTS:
            path = Path(tmp) / f"{name}.json"
            t0 = time.perf_counter()
            extra = {"workers": "1", "store": "off", "ahead": str(ahead), "graph": str(path)}
            get_experiment(name).run(RunParams(quick=True, extra=extra), lambda line: None)
            offset = len(nodes)
            for n in json.loads(path.read_text()):
                nodes.append({**n, "id": n["id"] + offset, "after": [a + offset for a in n["after"]]})
            log(f"{name} --quick: {len(nodes) - offset} points, {time.perf_counter() - t0:.1f} s here")
    for name in SINGLE_EXPERIMENTS:
        start_cpu, t0 = time.process_time(), time.perf_counter()
        get_experiment(name).run(RunParams(quick=True), lambda line: None)
        nodes.append({"id": len(nodes), "experiment": name, "label": f"{name} --quick (whole run)", "system": "",
                      "rate_per_s": 0.0, "seed": 0, "cpu_s": time.process_time() - start_cpu, "how": "run",
                      "after": []})
        log(f"{name} --quick: one node, {time.perf_counter() - t0:.1f} s here")
    return nodes


def predict(nodes: list[dict], per_point_s: float) -> dict:
    costs = [n["cpu_s"] + per_point_s for n in nodes]
    after = [n["after"] for n in nodes]
    path_s, path = critical_path(costs, after)
    total = sum(costs)
    steps = [nodes[i] for i in path]
    named = [f"{n['experiment']}: {n['label']} {n['system']} seed {n['seed']} rate {n['rate_per_s']:.4g}/s "
             f"({n['cpu_s']:.3f} s)" for n in steps]
    longest = max(nodes, key=lambda n: n["cpu_s"])
    return {"nodes": len(nodes), "total_cpu_s": round(total, 2), "per_point_overhead_s": per_point_s,
            "critical_path_s": round(path_s, 3), "critical_path": named,
            "longest_node": f"{longest['experiment']}: {longest['label']} {longest['system']} ({longest['cpu_s']:.3f} s)",
            "cores": {str(c): {"predicted_s": round(schedule_s(costs, after, c), 3),
                               "lower_bound_s": round(max(path_s, total / c), 3)} for c in CORES}}


def bench(log) -> dict:
    overheads = measure_overheads(log)
    ray_s = max(r["empty_point_s"] for r in overheads["executors"] if r["executor"] == "ray")
    nodes = record_graphs(log)
    prediction = predict(nodes, ray_s)
    for c, row in prediction["cores"].items():
        log(f"{c:>4} cores: {row['predicted_s']:.2f} s predicted (bound {row['lower_bound_s']:.2f} s)")
    log(f"critical path {prediction['critical_path_s']:.2f} s over {len(prediction['critical_path'])} points: "
        f"{prediction['critical_path'][0]} ... {prediction['critical_path'][-1]}")
    return {"machine": {"cpu_count": os.cpu_count(), "loadavg_1m_end": load_1m()}, "overhead": overheads,
            "quick_figure_set": prediction, "graph": nodes}
