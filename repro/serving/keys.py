"""What a simulated point's result depends on, as one key (sha256 hex) for the store of finished points.

A point's key covers: the system and its whole config (as_simulated: the settings its run never reads put back to
their defaults, so runs that cannot differ share a key), the requests' content (sha256 of every field of every
request: the key holds whatever made them, seeds, transforms and real data alike), the rate, the seed, whether the
run stops at its steady-state window, the runner (None: run_point; else a module function or a partial of one with
arguments that have a canonical form, and that module's source), the calibration file's sha256, and the simulator's
code version. A job (Sweep.job: a simulation that is not a serving point) is keyed by its function, arguments and
the code version (job_fields).

The code version is a sha256 over the source and data files of the packages a simulation imports (SIM_SOURCES,
less what it never imports: NOT_SIMULATED, checked by tests/serving/test_point_store.py in a fresh process), not a constant
bumped by hand: any edit there, even one that cannot change a number, makes every point new. That costs a re-run
after a refactor; a constant forgotten once would give stale numbers silently.
"""
import dataclasses
import functools
import hashlib
import inspect
import json
import sys
from pathlib import Path

from reference_impl.calibration import coefficients
from reference_impl.systems.registry import as_simulated, system_config

ROOT = Path(__file__).resolve().parents[2]
SIM_SOURCES = ("reference_impl", "workloads", "repro/serving/tasks.py")
NOT_SIMULATED = ("reference_impl/backends", "reference_impl/kernels")
SOURCE_SUFFIXES = (".py", ".json")


class Unkeyable(Exception):
    """A point whose inputs cannot be named (e.g. a lambda as its runner): it is run, never stored."""


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def canonical(obj) -> str:
    """One text per value: sorted keys, no spaces, floats as Python's shortest round-trip repr."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=_plain)


def _plain(obj):
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {"__type__": type(obj).__name__, **{f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}}
    if isinstance(obj, (tuple, set, frozenset)):
        return sorted(obj) if isinstance(obj, (set, frozenset)) else list(obj)
    raise Unkeyable(f"{type(obj).__name__} has no canonical form")


def simulated_files(root: Path = ROOT) -> list[Path]:
    """The files behind the code version, sorted."""
    files = []
    for entry in SIM_SOURCES:
        path = root / entry
        found = [path] if path.is_file() else [p for p in path.rglob("*") if p.suffix in SOURCE_SUFFIXES]
        files += [p for p in found if p.is_file() and "__pycache__" not in p.parts
                  and not any(p.relative_to(root).as_posix().startswith(skip + "/") for skip in NOT_SIMULATED)]
    return sorted(files)


def code_version(root: Path = ROOT) -> str:
    """sha256 over the relative path and bytes of every simulated_files entry."""
    digest = hashlib.sha256()
    for path in simulated_files(root):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


@functools.cache
def current_code_version() -> str:
    return code_version()


def file_sha256(path) -> str:
    stat = Path(path).stat()
    return _file_sha256(str(Path(path).resolve()), stat.st_mtime_ns, stat.st_size)


@functools.cache
def _file_sha256(path: str, mtime_ns: int, size: int) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def calibration_sha256(config) -> str:
    return file_sha256(config.coefficients_path or coefficients.DEFAULT_PATH)


def requests_sha256(requests) -> str:
    """sha256 of every field of every request, in order."""
    return sha256_text(canonical([[getattr(r, f.name) for f in dataclasses.fields(r)] for r in requests]))


def runner_key(runner) -> dict | None:
    """None for run_point; a module-level function, or a partial of one with arguments that have a canonical
    form, by name, arguments and its module's source; anything else is Unkeyable."""
    if runner is None:
        return None
    args, kwargs = (), {}
    if isinstance(runner, functools.partial):
        runner, args, kwargs = runner.func, runner.args, runner.keywords
    if not inspect.isfunction(runner) or "<" in runner.__qualname__ or runner.__module__ == "__main__":
        raise Unkeyable(f"runner {runner!r} is not a module-level function")
    module, name = runner.__module__, runner.__qualname__
    source = getattr(sys.modules.get(module), "__file__", None)
    if source is None:
        raise Unkeyable(f"runner {module}.{name} has no source file")
    return {"fn": f"{module}:{name}", "args": json.loads(canonical(list(args))),
            "kwargs": json.loads(canonical(kwargs)), "source": file_sha256(source)}


def point_fields(task, requests_sha: str) -> dict:
    """Everything `task`'s point depends on (module docstring); Unkeyable where it cannot be named."""
    if task.base is None:
        raise Unkeyable("a task without a cluster config")
    config = as_simulated(system_config(task.system, task.base))
    return {"system": task.system, "config": json.loads(canonical(config)), "requests_sha256": requests_sha,
            "rate_per_s": task.rate_per_s, "seed": task.seed, "steady_only": task.steady_only,
            "runner": runner_key(task.runner), "calibration_sha256": calibration_sha256(config),
            "code_version": current_code_version()}


def job_fields(fn) -> dict:
    """Everything a job's result (Sweep.job: `fn()`) depends on: the function and its arguments (runner_key) and
    the simulator's code version, which covers the committed calibration (a job given another calibration file
    would be keyed by the path, not its bytes: such a job is Unkeyable)."""
    args = (*fn.args, *fn.keywords.values()) if isinstance(fn, functools.partial) else ()
    if any(getattr(a, "coefficients_path", None) is not None for a in args):
        raise Unkeyable("a job on a calibration file of its own")
    return {"job": runner_key(fn), "code_version": current_code_version()}


def point_key(fields: dict) -> str:
    return sha256_text(canonical(fields))
