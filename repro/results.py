"""Result files: results/<experiment>/<run_id>/result.json, schema-checked, written atomically, resumable."""
import json
import time
from dataclasses import asdict
from functools import cache
from importlib import metadata, resources
from pathlib import Path

import jsonschema

from reference_impl.errors import InputError
from repro.atomic import write_json_atomic
from repro.experiments.base import Experiment, RunParams

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


def run_and_save(exp: Experiment, params: RunParams, results_dir: str | Path, *, force: bool = False,
                 run_id: str | None = None, log=print) -> tuple[Path, bool]:
    """Run `exp` unless its result exists (or `force`); returns (path, ran)."""
    if params.backend not in exp.backends:
        raise InputError(f"experiment {exp.name!r} runs on backends {', '.join(exp.backends)}, "
                         f"not {params.backend!r}")
    run_id = run_id or exp.run_id(params)
    path = result_path(results_dir, exp.name, run_id)
    if path.exists() and not force:
        log(f"{path} exists; skipped (use --force to run again)")
        return path, False
    start = time.perf_counter()
    data = exp.run(params, log)
    result = {"experiment": exp.name, "run_id": run_id, "figures": list(exp.figures), "params": asdict(params),
              "wall_s": round(time.perf_counter() - start, 3), "repro_version": _version(), "data": data}
    validate_result(result, exp.schema, where=f"the new {exp.name} result")
    write_json_atomic(path, result)
    return path, True


def load_results(results_dir: str | Path, exp: Experiment) -> list[dict]:
    """Every saved run of `exp`, validated, ordered by run id."""
    results = []
    for path in sorted((Path(results_dir) / exp.name).glob(f"*/{RESULT_FILE}")):
        try:
            result = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise InputError(f"{path} is not valid JSON ({exc.msg} at line {exc.lineno}); rerun with --force") from None
        validate_result(result, exp.schema, where=str(path))
        results.append(result)
    return results
