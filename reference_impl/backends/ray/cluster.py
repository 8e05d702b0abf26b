"""Where the Ray backend runs: a private Ray started here or an existing cluster, and how instances are placed."""
import os
import socket
from dataclasses import dataclass
from pathlib import Path

import ray

import reference_impl
from reference_impl.errors import InputError

STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")


@dataclass(frozen=True, slots=True)
class RayConfig:
    address: str | None = None  # None or "local": start a private Ray here; else join the cluster there
    num_cpus: int = 2  # CPUs of a private Ray
    cpus_per_instance: float = 0.5  # placement-group bundle of one instance
    gpus_per_instance: float = 0.0  # > 0: one GPU group per instance, the model and KV on its GPU, NCCL
    placement_strategy: str = "PACK"
    timeout_s: float = 120.0  # waiting for the placement group, a restarting gManager, a silent actor
    dist_timeout_s: float = 60.0  # a data-plane operation waiting on a peer longer than this fails the group
    py_modules: tuple[str, ...] = ()  # package folders shipped to a cluster beside reference_impl

    def __post_init__(self):
        if self.num_cpus < 1 or self.cpus_per_instance <= 0 or self.gpus_per_instance < 0:
            raise InputError("Ray needs >= 1 CPU, a positive CPU share per instance and >= 0 GPUs per instance")
        if self.placement_strategy not in STRATEGIES:
            raise InputError(f"placement strategy must be one of {', '.join(STRATEGIES)}")
        if self.dist_timeout_s <= 0:
            raise InputError("the data-plane timeout must be > 0 s")

    @property
    def is_private(self) -> bool:
        return self.address in (None, "local")


def check_reachable(address: str, timeout_s: float) -> None:
    """A quick TCP probe of HOST:PORT (or ray://HOST:PORT): Ray itself retries an unreachable head for minutes."""
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if address == "auto" or not sep or not port.isdigit():
        return
    try:
        socket.create_connection((host, int(port)), timeout=min(timeout_s, 10.0)).close()
    except OSError as err:
        raise InputError(f"cannot reach the Ray cluster at {address!r}: {err}; start it with "
                         f"`ray start --head --port {port}` or check --address") from None


def ray_prints_to_stderr() -> None:
    """Whatever Ray prints in this process goes to stderr: a command's stdout carries only its result.

    `log_to_driver=False` keeps the workers' output in their log files, but the driver's thread that relays the
    raylet's error messages ("(raylet) A worker died or was killed ...", about 1 KB) prints them on stdout and
    Ray has no setting for that (2.60): its one printing function is wrapped to mark every message an error."""
    printer = ray._private.worker.print_to_stdstream
    if getattr(printer, "to_stderr", False):
        return

    def to_stderr(data, ignore_prefix):
        printer({**data, "is_err": True}, ignore_prefix)

    to_stderr.to_stderr = True
    ray._private.worker.print_to_stdstream = to_stderr


def init_ray(rc: RayConfig) -> bool:
    """Start or join Ray; True when this call started it (the caller shuts it down). A private Ray's workers
    inherit this process's environment (PYTHONPATH included); a remote cluster gets this package and
    `rc.py_modules` shipped as py_modules, so its nodes need only Python, ray and what those import (the engine:
    torch; simulated points: numpy). Ray's messages on this process go to stderr."""
    if ray.is_initialized():
        return False
    ray_prints_to_stderr()
    kwargs = {"include_dashboard": False, "logging_level": "WARNING", "log_to_driver": False}
    package = str(Path(reference_impl.__file__).parent)
    if rc.is_private:
        # workers at this process's priority (Ray starts them at nice 15): timings compare with the local backend
        os.environ.setdefault("RAY_worker_niceness", "0")
        ray.init(address="local", num_cpus=rc.num_cpus, **kwargs)  # never a cluster `ray start` left here
        return True
    check_reachable(rc.address, rc.timeout_s)
    try:
        ray.init(address=rc.address, runtime_env={"py_modules": [package, *rc.py_modules]}, **kwargs)
    except (ConnectionError, ValueError, RuntimeError) as err:
        raise InputError(f"cannot join the Ray cluster at {rc.address!r}: {err}".splitlines()[0]) from None
    return True
