"""Result files: results/<experiment>/<run_id>/result.json, schema-checked, written atomically, resumable."""
import json
import re
import time
from dataclasses import asdict, dataclass, replace
from functools import cache
from importlib import metadata, resources
from pathlib import Path

import jsonschema

from reference_impl.atomic import check_writable_dir, write_json_atomic
from reference_impl.errors import InputError
from repro.framework.base import Experiment, RunParams
from repro.framework.params import fingerprint, overrides, parse_params

RESULT_FILE = "result.json"


@cache
def load_schema(name: str) -> dict:
    try:
        return json.loads(resources.files("repro.schemas").joinpath(name).read_text())
    except FileNotFoundError:
        raise InputError(f"no schema {name!r} in repro/schemas") from None


def validate_result(result: dict, data_schema: str, where: str = "result") -> None:
    """Raise InputError (one line) if the envelope or its data does not match the schemas."""
    for schema, obj in ((load_schema("result.schema.json"), result),
                        (load_schema(data_schema), result.get("data") if isinstance(result, dict) else None)):
        error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema).iter_errors(obj))
        if error is not None:
            path = "/".join(str(p) for p in error.absolute_path) or "(top)"
            raise InputError(f"{where} fails its schema at {path}: {error.message}")


def result_path(results_dir: str | Path, experiment: str, run_id: str) -> Path:
    return Path(results_dir) / experiment / run_id / RESULT_FILE


def _version() -> str:
    try:
        return metadata.version("infinite-llm-repro")
    except metadata.PackageNotFoundError:
        return "unknown"


RUN_ID_PATTERN = re.compile(r"^[A-Za-z0-9._-]+$")  # as result.schema.json


def resolve_params(exp: Experiment, params: RunParams) -> tuple[RunParams, dict]:
    """(params with `extra` typed and defaults filled, the overrides that make it a non-default run)."""
    if params.backend not in exp.backends:
        raise InputError(f"experiment {exp.name!r} runs on backends {', '.join(exp.backends)}, "
                         f"not {params.backend!r}")
    typed = parse_params(exp.name, exp.params, params.extra, params.backend)
    return replace(params, extra=typed), overrides(exp.params, params.extra, typed)


def check_run_id(run_id: str) -> str:
    if not RUN_ID_PATTERN.match(run_id) or run_id in (".", ".."):
        raise InputError(f"--run-id {run_id!r}: use letters, digits, '.', '_' and '-' only")
    return run_id


def _same_run(path: Path, params: RunParams, changed: dict) -> str | None:
    """None if the result at `path` was made with these params, else how it differs."""
    try:
        stored = json.loads(path.read_text())["params"]
    except (OSError, ValueError, KeyError, TypeError):
        return "it cannot be read"
    now = {"quick": params.quick, "backend": params.backend, "seed": params.seed,
           "overrides": json.loads(json.dumps(changed, default=str))}
    then = {key: stored.get(key) for key in ("quick", "backend", "seed")}
    then["overrides"] = stored.get("overrides", stored.get("extra", {}))
    diff = [f"{key} {then[key]!r} there, {now[key]!r} now" for key in now if then[key] != now[key]]
    return "; ".join(diff) or None


@dataclass(frozen=True, slots=True)
class PlannedRun:
    """A run `plan_run` found to do: its experiment, typed params, the overrides that name it, and where it goes."""

    exp: Experiment
    params: RunParams
    changed: dict
    run_id: str
    path: Path


def plan_run(exp: Experiment, params: RunParams, results_dir: str | Path, *, force: bool = False,
             run_id: str | None = None, log=print, again: str = "--force") -> tuple[Path, PlannedRun | None]:
    """(the result's path, the run to do or None when the same run's result exists and not `force`).

    A non-default `--param` makes another run: its id ends with a hash of the changed values. An existing result
    made with other params under the same id (an explicit `run_id`) is an error, never a silent skip."""
    params, changed = resolve_params(exp, params)
    if run_id is None:
        run_id = exp.run_id(params) + (f"-p{fingerprint(changed)}" if changed else "")
    path = result_path(results_dir, exp.name, check_run_id(run_id))
    if path.exists() and not force:
        differs = _same_run(path, params, changed)
        if differs:
            raise InputError(f"{path} holds another run ({differs}); use --force to replace it or another --run-id")
        log(f"{path} exists; skipped (use {again} to run again)")
        return path, None
    check_writable_dir(path.parent, "--results-dir")
    if changed:
        log(f"{exp.name}: run {run_id} with " + ", ".join(f"{k}={v}" for k, v in sorted(changed.items())))
    return path, PlannedRun(exp, params, changed, run_id, path)


def save_run(planned: PlannedRun, data: dict, wall_s: float) -> Path:
    """Write `planned`'s result (its `data`, validated against the experiment's schema) atomically."""
    exp = planned.exp
    result = {"experiment": exp.name, "run_id": planned.run_id, "figures": list(exp.figures),
              "params": {**asdict(planned.params), "overrides": planned.changed},
              "wall_s": round(wall_s, 3), "repro_version": _version(), "data": data}
    result = json.loads(json.dumps(result, default=str))
    validate_result(result, exp.schema, where=f"the new {exp.name} result")
    write_json_atomic(planned.path, result)
    return planned.path


def run_and_save(exp: Experiment, params: RunParams, results_dir: str | Path, *, force: bool = False,
                 run_id: str | None = None, log=print) -> tuple[Path, bool]:
    """Run `exp` unless the same run's result exists (or `force`); returns (path, ran). See plan_run."""
    path, planned = plan_run(exp, params, results_dir, force=force, run_id=run_id, log=log)
    if planned is None:
        return path, False
    start = time.perf_counter()
    data = exp.run(planned.params, log)
    return save_run(planned, data, time.perf_counter() - start), True


def load_results(results_dir: str | Path, exp: Experiment) -> list[dict]:
    """Every saved run of `exp`, validated, ordered by run id."""
    results = []
    folder = Path(results_dir) / exp.name
    if folder.exists() and not folder.is_dir():
        raise InputError(f"{folder} is a file; results of {exp.name} belong in a folder of that name")
    for path in sorted(folder.glob(f"*/{RESULT_FILE}")):
        try:
            result = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise InputError(f"{path} is not valid JSON ({exc.msg} at line {exc.lineno}); rerun with --force") from None
        validate_result(result, exp.schema, where=str(path))
        results.append(result)
    return results
