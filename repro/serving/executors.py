"""Where simulated points run: this process, a local process pool, or a Ray cluster; one per run.

Each takes `submit(fn, arg)` and returns a concurrent.futures.Future, and says how many points it runs at once
(`slots`), so the sweep (repro/serving/sweep.py) keeps its own queue, longest point first, and hands out a point
whenever a slot frees. Ray tasks are retried where a worker or node dies (MAX_RETRIES): a lost node costs only the
points it was running.
"""
import functools
import time
from concurrent.futures import Future, ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

import reference_impl
import repro
import workloads
from reference_impl.errors import InputError

MAX_RETRIES = 5  # runs of a Ray task after its worker or node died
SLOTS_REFRESH_S = 5.0  # a Ray cluster's CPUs are read again this often (nodes come and go)
LOCAL = "local"


class InProcess:
    """Points run here, one at a time, in the order handed out."""
    name = "this process"
    slots = 1

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
    """A process pool of `workers` processes (spawned: the parent may have torch and its threads loaded)."""

    def __init__(self, workers: int):
        self.slots = workers
        self.name = f"a local pool of {workers} processes"
        self._pool = ProcessPoolExecutor(workers, mp_context=get_context("spawn"))

    def submit(self, fn, arg) -> Future:
        return self._pool.submit(fn, arg)

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


def _call(fn, arg):
    return fn(arg)


@functools.cache
def _remote_call():
    import ray
    return ray.remote(num_cpus=1, max_retries=MAX_RETRIES)(_call)


class RayCluster:
    """Each point a Ray task of one CPU on the cluster at `address` (HOST:PORT, auto) or on a private Ray of
    `workers` CPUs started here (address 'local'); a Ray already initialised in this process is used as it is."""

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
    """Start or join Ray for points (True when this call started it). A private Ray is the engine backend's
    (init_ray); a cluster gets the three packages a point imports as py_modules, so its nodes need only Python,
    numpy and ray."""
    import ray

    from reference_impl.backends.ray.cluster import RayConfig, check_reachable, init_ray, ray_prints_to_stderr
    if ray.is_initialized():
        return False
    if address == LOCAL:
        return init_ray(RayConfig(address=LOCAL, num_cpus=workers))
    check_reachable(address, timeout_s=10.0)
    ray_prints_to_stderr()
    packages = [str(Path(m.__file__).parent) for m in (reference_impl, repro, workloads)]
    try:
        ray.init(address=address, runtime_env={"py_modules": packages}, include_dashboard=False,
                 logging_level="WARNING", log_to_driver=False)
    except (ConnectionError, ValueError, RuntimeError) as err:
        raise InputError(f"cannot join the Ray cluster at {address!r}: {err}".splitlines()[0]) from None
    return True


def make_executor(address: str | None, workers: int):
    """Ray when an address is given, else a local pool of `workers` processes (this process for one)."""
    if address is not None:
        return RayCluster(address, workers)
    return InProcess() if workers <= 1 else LocalPool(workers)
