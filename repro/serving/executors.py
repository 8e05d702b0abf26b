"""Where simulated points run: this process, a local process pool, or a Ray cluster; one per run.

Each takes `submit(fn, arg)` and returns a concurrent.futures.Future, and says how many points it runs at once
(`slots`), so the sweep (repro/serving/sweep.py) keeps its own queue, longest point first, and hands out a point
whenever a slot frees (`batch_s` > 0: short points several to a call, run_batch). A point whose worker or node dies
runs again (MAX_RETRIES): Ray retries the task, the local pool starts again; it costs only the points it was
running.
"""
import functools
import os
import threading
import time
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from multiprocessing import get_context
from pathlib import Path

import repro
import workloads

MAX_RETRIES = 5  # runs of a point again after its worker (Ray: or node) died
# A call to another process costs 1-10 ms here, a Ray task 4-7 ms (results/bench/sweep.json): points expected to
# take less than this together run as one call, so that cost stays a few percent of the points' own
BATCH_S = 0.5
SLOTS_REFRESH_S = 5.0  # a Ray cluster's CPUs are read again this often (nodes come and go)


class InProcess:
    """Points run here, one at a time, in the order handed out."""
    name = "this process"
    slots = 1
    batch_s = 0.0

    def submit(self, fn, arg) -> Future:
        future = Future()
        try:
            future.set_result(fn(arg))
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting coroutine
            future.set_exception(exc)
        return future

    def close(self) -> None:
        pass


class LocalPool:
    """A process pool of `workers` processes (spawned: the parent may have torch and its threads loaded). A worker
    that dies breaks Python's pool and every call it holds: the pool is started again and those calls resubmitted
    (MAX_RETRIES each), so a dead worker costs only the points it was running. Short points go several to a call
    (batch_s), as on Ray."""
    batch_s = BATCH_S

    def __init__(self, workers: int):
        self.slots = workers
        self.name = f"a local pool of {workers} processes"
        self.restarts = 0  # pools started again after a worker died
        self._lock = threading.Lock()
        self._pool, self._generation, self._closed = self._start(), 0, False

    def _start(self) -> ProcessPoolExecutor:
        return ProcessPoolExecutor(self.slots, mp_context=get_context("spawn"))

    def submit(self, fn, arg) -> Future:
        outer = Future()
        self._submit(outer, fn, arg, MAX_RETRIES)
        return outer

    def _submit(self, outer: Future, fn, arg, retries: int) -> None:
        while True:
            with self._lock:
                if self._closed:
                    outer.cancel()
                    return
                pool, generation = self._pool, self._generation
            try:
                inner = pool.submit(fn, arg)
            except (BrokenProcessPool, RuntimeError):  # broken or shut down since it was read: the next pool
                self._restart(generation)
                continue
            inner.add_done_callback(functools.partial(self._settle, outer, fn, arg, retries, generation))
            return

    def _settle(self, outer: Future, fn, arg, retries: int, generation: int, inner: Future) -> None:
        if inner.cancelled():
            outer.cancel()
            return
        exc = inner.exception()
        if isinstance(exc, BrokenProcessPool) and retries > 0:
            self._restart(generation)
            self._submit(outer, fn, arg, retries - 1)
        elif exc is not None:
            outer.set_exception(exc)
        else:
            outer.set_result(inner.result())

    def _restart(self, generation: int) -> None:
        """A new pool in place of the broken one of `generation` (once, however many of its calls report it)."""
        with self._lock:
            if self._closed or generation != self._generation:
                return
            broken, self._pool = self._pool, self._start()
            self._generation += 1
            self.restarts += 1
        broken.shutdown(wait=False, cancel_futures=True)  # maybe on its own thread: never wait here

    def close(self) -> None:
        with self._lock:
            self._closed = True
        self._pool.shutdown(wait=True, cancel_futures=True)


def run_batch(calls: list) -> list:
    """Several (fn, arg) calls as one (an executor's batch_s): [(result, None) or (None, exception)] in order."""
    out = []
    for fn, arg in calls:
        try:
            out.append((fn(arg), None))
        except Exception as exc:  # noqa: BLE001 - raised where that point is awaited
            out.append((None, exc))
    return out


def _call(fn, arg):
    return fn(arg)


@functools.cache
def _remote_call():
    import ray
    return ray.remote(num_cpus=1, max_retries=MAX_RETRIES)(_call)


class RayCluster:
    """Each point a Ray task of one CPU on the cluster at `address` (HOST:PORT, auto) or on a private Ray of
    `workers` CPUs started here (address 'local'); a Ray already initialised in this process is used as it is.
    Points the sweep expects to be short are handed out several to a task, up to `batch_s` seconds of CPU."""
    batch_s = BATCH_S

    def __init__(self, address: str, workers: int):
        import ray
        self._ray = ray
        self._started = connect(address, workers)
        self._slots, self._read_at = 1, -SLOTS_REFRESH_S
        self.name = f"Ray at {address} ({self.slots} CPUs)"

    @property
    def slots(self) -> int:
        if time.monotonic() - self._read_at >= SLOTS_REFRESH_S:
            self._slots = max(1, int(self._ray.cluster_resources().get("CPU", 1)))
            self._read_at = time.monotonic()
        return self._slots

    def submit(self, fn, arg) -> Future:
        return _remote_call().remote(fn, arg).future()

    def close(self) -> None:
        if self._started:
            self._ray.shutdown()


def connect(address: str, workers: int) -> bool:
    """Start or join Ray for points (True when this call started it): the engine backend's init_ray, with the
    two other packages a point imports shipped to a cluster, so its nodes need only Python, numpy and ray."""
    from reference_impl.backends.ray.cluster import RayConfig, init_ray
    packages = tuple(str(Path(m.__file__).parent) for m in (repro, workloads))
    return init_ray(RayConfig(address=address, num_cpus=workers, py_modules=packages))


def ray_address(address: str | None) -> str | None:
    """`--address`, else $RAY_ADDRESS (set by `ray job submit` too), else None (no Ray)."""
    return address if address is not None else os.environ.get("RAY_ADDRESS") or None


def make_executor(address: str | None, workers: int):
    """Ray when an address is given or $RAY_ADDRESS is set, else a local pool of `workers` processes (this process
    for one)."""
    address = ray_address(address)
    if address is not None:
        return RayCluster(address, workers)
    return InProcess() if workers <= 1 else LocalPool(workers)
