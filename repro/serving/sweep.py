"""The driver of a run's simulated points: each curve search awaits its own points and submits the next ones as
soon as those are done, so independent groups, systems and seeds proceed together (no barrier between phases).

    with open_sweep(params, log, "e2e") as sweep:
        groups = sweep.run(curves(todo, seeds, sweep))      # coroutines awaiting sweep.point(task)

`Sweep.point(task)`: the same future when this run already has the same key (run or running), the stored point
when the store has it (repro/serving/store.py), else the task queued here and handed to the executor
(repro/serving/executors.py) longest first whenever a slot frees (short points several to a call where the
executor asks: `_take`); its point stored when done. Coroutines that wait
on several others use `sweep.gather`, so the run's task graph (repro/serving/task_graph.py) knows what each point
waited for. One bar counts the points known so far.
"""
import asyncio
import bisect
import heapq
import itertools
from collections import Counter
from contextlib import contextmanager
from dataclasses import replace
from functools import partial

from reference_impl.atomic import write_json_atomic

from repro.framework.params import Param
from repro.progress import live_bar
from repro.serving.executors import InProcess, make_executor, run_batch
from repro.serving.keys import Unkeyable, job_fields, point_fields, point_key, requests_sha256
from repro.serving.store import open_store
from repro.serving.task_graph import TaskGraph
from repro.serving.tasks import (PointTask, RequestSpec, default_workers, log_job, log_point, request_cost,
                                 requests_of, run_call, run_job)

# Doublings a plateau climb submits past the one it needs (repro/serving/plateau.py) where the executor has at
# least SPECULATE_SLOTS slots: on a cluster the climbs are the figure set's critical path; on a few cores the
# unneeded points would only cost time
SPECULATE_AHEAD = 2
SPECULATE_SLOTS = 16

SWEEP_PARAMS = (
    Param("workers", int, None, "processes for the points (default: one per core; 1 with --quick); with --address "
          "local: the CPUs of that Ray", in_run_id=False),  # the points do not depend on it (tested)
    Param("graph", str, None, "write the run's task graph (each point's CPU seconds and the points it waited for) "
          "to this JSON file", in_run_id=False),
    Param("ahead", int, None, "doublings a plateau climb submits before the rule asks for them (repro/serving/"
          "plateau.py; default: 2 on executors of 16 slots or more, else 0); the points do not depend on it",
          in_run_id=False),
    Param("store", str, None, "folder of finished points reused across runs (default $REPRO_POINT_STORE, else "
          "results/.points); off: none", in_run_id=False),
)


def default_ahead(slots: int) -> int:
    return SPECULATE_AHEAD if slots >= SPECULATE_SLOTS else 0


def sweeps_points(experiment) -> bool:
    """Whether `experiment` runs its simulated points through a sweep (it takes SWEEP_PARAMS)."""
    return any(p.name == SWEEP_PARAMS[-1].name for p in experiment.params)


def sweep_params(backends: tuple[str, ...] = ()) -> tuple[Param, ...]:
    """SWEEP_PARAMS for an experiment's `backends` (where it runs simulated points)."""
    return tuple(replace(p, backends=backends) for p in SWEEP_PARAMS)


class Sweep:
    def __init__(self, executor, store, log, bar=None, experiment: str = "", ahead: int | None = None):
        self.executor, self.store, self.log, self.bar = executor, store, log, bar
        self.ahead = default_ahead(executor.slots) if ahead is None else ahead  # (plateau.py: speculation)
        self.graph = TaskGraph(experiment)
        self.counts = {"run": 0, "stored": 0, "shared": 0}
        self.calls = 0  # handed to the executor: a point, or a batch of short ones
        self._s_per_cost = []  # sorted CPU seconds per request cost of the points run (sizes batches)
        self._spec_info = {}  # RequestSpec -> (sha256, cost): each spec's requests built once on this side
        self._loop, self._in_flight = None, 0

    @property
    def in_flight(self) -> int:
        """Calls (a point, or a batch of short ones) handed to the executor and not yet back."""
        return self._in_flight

    def run(self, coro):
        """Run `coro` (awaiting this sweep's points) to its end, under a bar of its own unless the sweep has one."""
        if self.bar is not None:
            return asyncio.run(coro)
        with live_bar(desc="simulated points", total=0, unit="point") as self.bar:
            try:
                return asyncio.run(coro)
            finally:
                self.bar = None

    async def gather(self, *coros) -> list:
        return await self.graph.gather(*coros)

    def after(self, points) -> None:
        self.graph.after(points)

    def start(self, coro):
        return self.graph.start(coro)

    async def join(self, task):
        return await self.graph.join(task)

    async def points(self, tasks) -> list[dict]:
        return await self.gather(*(self.point(t) for t in tasks))

    async def point(self, task) -> dict:
        """`task`'s point (module docstring)."""
        self._bind()
        self._known(1)
        describe = (task.label, task.system, task.rate_per_s, task.seed)
        if task.answer is not None:
            known = task.answer(task)
            if known is not None:
                return self._done(self.graph.add(*describe, "known"), partial(log_point, self.log, task), known, 0.0,
                                  "known")
            task = replace(task, answer=None)
        sha, cost = self._requests_info(task.requests)
        return await self._get(describe, _keyed(point_fields, task, sha), cost, run_job, (task, sha),
                               partial(log_point, self.log, task))

    async def job(self, fn, label: str, cost: float = 0.0, system: str = ""):
        """`fn()` (a picklable callable: a module function or a partial of one) run as a point is: on the executor,
        from the store when its key is there (keys.job_fields), once per run; for simulations that are not serving
        points (dgfm's arms, context-length's batches). `cost` orders the queue (longest first); `system` names
        its node's owner in the task graph."""
        self._bind()
        self._known(1)
        return await self._get((label, system, 0.0, 0), _keyed(job_fields, fn), cost, run_call, fn,
                               partial(log_job, self.log, label))

    async def _get(self, describe: tuple, keyed: tuple, cost: float, call, arg, log_line):
        key, fields = keyed
        if key is not None and key in self._by_key:  # the same key, run or running in this sweep
            self.counts["shared"] += 1
            node = self.graph.add(*describe, "shared")
            result, _ = await asyncio.shield(self._by_key[key])
            return self._done(node, log_line, result, 0.0, "shared")
        stored = self.store.get(key) if self.store is not None and key is not None else None
        if stored is not None:
            self.counts["stored"] += 1
            return self._done(self.graph.add(*describe, "stored"), log_line, stored.point, stored.cpu_s,
                              "from the store")
        node = self.graph.add(*describe, "run")
        future = self._loop.create_future()
        if key is not None:
            self._by_key[key] = future
        heapq.heappush(self._queue, (-cost, next(self._order), call, arg, key, fields, future))
        self._dispatch()
        result, cpu_s = await future
        return self._done(node, log_line, result, cpu_s)

    def _bind(self):
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # a new sweep.run: nothing of the last one is pending
            self._loop, self._queue, self._by_key, self._order = loop, [], {}, itertools.count()

    def _requests_info(self, requests) -> tuple[str, float]:
        if not isinstance(requests, RequestSpec):
            built = requests_of(requests)
            return requests_sha256(built), request_cost(built)
        if requests not in self._spec_info:
            built = requests.build()
            self._spec_info[requests] = (requests_sha256(built), request_cost(built))
        return self._spec_info[requests]

    def _dispatch(self):
        while self._queue and self._in_flight < self.executor.slots:
            batch = self._take()
            self._in_flight += 1
            self.calls += 1
            loop = self._loop
            if len(batch) == 1:
                done = self.executor.submit(batch[0][2], batch[0][3])
            else:
                done = self.executor.submit(run_batch, [(entry[2], entry[3]) for entry in batch])

            def finished(done, batch=batch):
                try:
                    loop.call_soon_threadsafe(self._finished, done, batch)
                except RuntimeError:  # the run ended (another point failed): nothing waits for this one
                    pass

            done.add_done_callback(finished)

    def _take(self) -> list[tuple]:
        """The longest queued point, with the next ones while their expected CPU (their request cost at the median
        CPU seconds per cost of the points run so far) stays within the executor's batch_s, leaving every slot
        its share of the queue."""
        batch = [heapq.heappop(self._queue)]
        budget_s, per_cost = self.executor.batch_s, self._s_per_cost
        if budget_s <= 0 or not per_cost or -batch[0][0] <= 0:
            return batch
        s_per_cost = per_cost[len(per_cost) // 2]
        most = max(1, -(-(len(self._queue) + 1) // self.executor.slots))
        total_s = -batch[0][0] * s_per_cost
        while self._queue and len(batch) < most and -self._queue[0][0] > 0:
            next_s = -self._queue[0][0] * s_per_cost
            if total_s + next_s > budget_s:
                break
            batch.append(heapq.heappop(self._queue))
            total_s += next_s
        return batch

    def _finished(self, done, batch):
        self._in_flight -= 1
        try:
            ran = done.result()
            outcomes = ran if len(batch) > 1 else [(ran, None)]
        except BaseException as exc:  # noqa: BLE001 - raised where the point is awaited
            outcomes = [(None, exc)] * len(batch)
        for (minus_cost, _, _, _, key, fields, future), (ran, exc) in zip(batch, outcomes):
            self._settle(-minus_cost, key, fields, future, ran, exc)
        self._dispatch()

    def _settle(self, cost: float, key, fields, future, ran, exc):
        if exc is not None:
            self._by_key.pop(key, None)
            if not future.done():
                future.set_exception(exc)
            return
        self.counts["run"] += 1
        if cost > 0:
            bisect.insort(self._s_per_cost, ran["cpu_s"] / cost)
        try:
            if self.store is not None and key is not None:
                self.store.put(key, fields, ran["point"], ran["cpu_s"])
        except Exception as err:  # noqa: BLE001 - e.g. a full disk: the run fails, here it would hang
            future.set_exception(err)
        if not future.done():
            future.set_result((ran["point"], ran["cpu_s"]))

    def _known(self, n: int):
        if self.bar is not None:
            self.bar.total = (self.bar.total or 0) + n
            self.bar.refresh()

    def _done(self, node, log_line, result, cpu_s: float, where: str | None = None):
        self.graph.done(node, result, cpu_s)
        log_line(result, where)
        if self.bar is not None:
            self.bar.update(1)
        return result


def _keyed(fields_of, *args) -> tuple[str | None, dict | None]:
    """(key, fields) of what `fields_of(*args)` names, or (None, None): run, never stored or shared."""
    try:
        fields = fields_of(*args)
    except Unkeyable:
        return None, None
    return point_key(fields), fields


def _int_or_none(value) -> int | None:
    return None if value is None else int(value)


def in_process(log) -> Sweep:
    """Points run here one at a time, no store, a bar per sweep.run (tests, and runners that must run here)."""
    return Sweep(InProcess(), None, log)


@contextmanager
def open_sweep(params, log, desc: str):
    """The run's sweep: its executor (Ray with --address, else a local pool of `--param workers`), its store
    (`--param store`), one bar of its points, and its task graph written where `--param graph` says."""
    executor = make_executor(params.address, default_workers(params))
    store = open_store(params.extra.get("store"))
    log(f"{desc}: points on {executor.name}; store {store.folder if store else 'off'}")
    try:
        take = getattr(log, "taken", None)  # the run's one bar (repro run's progress_log), else one of its own
        with (take or live_bar)(desc=f"{desc} points", unit="point") as bar:
            sweep = Sweep(executor, store, log, bar, experiment=desc, ahead=_int_or_none(params.extra.get("ahead")))
            yield sweep
        for line in counts_lines(sweep.graph.nodes) or [f"{desc}: 0 points run, 0 from the store, 0 shared "
                                                        f"within the run"]:
            log(line)
        if params.extra.get("graph"):
            write_json_atomic(params.extra["graph"], sweep.graph.to_json())
    finally:
        executor.close()


def counts_lines(nodes) -> list[str]:
    """Per experiment on the sweep: its points run, read from the store, and shared with a point run this run."""
    how = Counter((n.experiment, n.how) for n in nodes)
    return [f"{name}: {how[name, 'run']} points run, {how[name, 'stored']} from the store, {how[name, 'shared']} "
            f"shared within the run" for name in dict.fromkeys(n.experiment for n in nodes)]


def run_in_sweep(params, log, desc: str, on_sweep) -> dict:
    """`on_sweep(params, log, sweep)` (an experiment's points, awaited: Experiment.on_sweep) run to its end on a
    sweep of its own."""
    with open_sweep(params, log, desc) as sweep:
        return sweep.run(on_sweep(params, log, sweep))


def run_tasks(tasks: list[PointTask], log, sweep=None) -> list[dict]:
    """The points of `tasks`, in order, run by `sweep` (repro/serving/sweep.py; None: in this process, no store).
    Each point is a deterministic simulation, so the numbers do not depend on where it ran (only wall_s)."""
    sweep = sweep or in_process(log)
    return sweep.run(sweep.points(tasks))
