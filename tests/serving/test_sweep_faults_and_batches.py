"""Where the sweep's points run does not change them: a local pool whose worker is killed mid-sweep starts again
and reruns the points it lost (repro/serving/executors.py LocalPool), and points handed out several to a call
(Sweep._take, on an executor with batch_s) come back the same as one at a time in this process."""
import os
import signal
from concurrent.futures import Future
from dataclasses import replace
from functools import partial

from repro.experiments.e2e import GPU, _requests
from repro.serving.executors import LocalPool
from repro.serving.sweep import Sweep, in_process
from repro.serving.tasks import PointTask, RequestSpec, run_point
from reference_impl.sim.config import sim_engine
from reference_impl.systems.registry import cluster

RATES_PER_S = (2.0, 8.0, 32.0)


def _tasks(requests: int = 120) -> list[PointTask]:
    base = cluster("llama2-7b", GPU, 4, engine=sim_engine(seed=0))
    make = partial(_requests, 0, requests, "fitted")
    return [PointTask(system, base, RequestSpec(make, rate, seed), rate, "faults", seed)
            for rate in RATES_PER_S for system in ("infinite-llm", "vllm-m") for seed in (0, 1)]


def _without_wall_times(points):
    return [{k: v for k, v in p.items() if k != "wall_s"} for p in points]


def logged_dies_once(runs: str, marker: str | None, task) -> dict:
    """Notes the run in the file `runs`; a call given `marker` that creates it kills its own process, later calls
    (and every call without it) run the point."""
    with open(runs, "a") as out:
        out.write(f"{task.system} {task.rate_per_s} {task.seed}\n")
    try:
        if marker is not None:
            with open(marker, "x"):
                pass
            os.kill(os.getpid(), signal.SIGKILL)
    except FileExistsError:
        pass
    return run_point(task.system, task.base, task.requests, task.rate_per_s, task.seed, steady_only=task.steady_only)


def test_a_pool_worker_killed_mid_sweep_costs_only_its_points_and_the_points_equal_this_processs(tmp_path):
    tasks = _tasks()
    here = in_process(lambda line: None)
    reference = here.run(here.points(tasks))
    runs, marker = tmp_path / "runs", tmp_path / "killed"
    middle = len(tasks) // 2
    doomed = [replace(t, runner=partial(logged_dies_once, str(runs), str(marker) if i == middle else None))
              for i, t in enumerate(tasks)]
    pool = LocalPool(2)
    pool.batch_s = 0.0  # one point a call: what a death costs is then countable
    try:
        sweep = Sweep(pool, None, lambda line: None)
        points = sweep.run(sweep.points(doomed))
    finally:
        pool.close()
    assert marker.exists() and pool.restarts == 1  # a worker died, once, and the pool started again
    ran = runs.read_text().splitlines()
    named = [f"{t.system} {t.rate_per_s} {t.seed}" for t in tasks]
    # Python's pool fails every call it holds when a worker dies: the killed point and at most the one running
    # beside it run again, nothing finished before
    assert sorted(set(ran)) == sorted(named) and ran.count(named[middle]) == 2
    assert len(tasks) + 1 <= len(ran) <= len(tasks) + pool.slots
    assert _without_wall_times(points) == _without_wall_times(reference)


class Batching:
    """Runs each call here when handed out, like InProcess, but with slots and a batch budget; keeps each call's
    size."""
    name = "batching here"

    def __init__(self, slots: int, batch_s: float):
        self.slots, self.batch_s, self.sizes = slots, batch_s, []

    def submit(self, fn, arg) -> Future:
        self.sizes.append(len(arg) if isinstance(arg, list) else 1)
        future = Future()
        future.set_result(fn(arg))
        return future

    def close(self) -> None:
        pass


def test_short_points_go_several_to_a_call_and_come_back_as_run_one_at_a_time():
    tasks = _tasks(60)
    here = in_process(lambda line: None)
    reference = here.run(here.points(tasks))
    median_s = sorted(n.cpu_s for n in here.graph.nodes)[len(tasks) // 2]
    executor = Batching(slots=2, batch_s=4 * median_s)
    sweep = Sweep(executor, None, lambda line: None)
    points = sweep.run(sweep.points(tasks))
    assert _without_wall_times(points) == _without_wall_times(reference)
    assert sum(executor.sizes) == len(tasks) and sweep.calls == len(executor.sizes) < len(tasks)
    assert max(executor.sizes) <= -(-len(tasks) // executor.slots)  # every slot keeps a share of the queue
    unbatched = Sweep(Batching(slots=2, batch_s=0.0), None, lambda line: None)
    unbatched.run(unbatched.points(tasks))
    assert unbatched.calls == len(tasks)
