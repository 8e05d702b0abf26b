"""Workload files: one JSON object per line (schemas/request.schema.json), written atomically.

save_jsonl(load_jsonl(f)) reproduces a file written by save_jsonl byte for byte: fixed key order,
fixed separators, floats written with repr (shortest round-tripping form).
"""
import json
import math
import os
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path

import jsonschema

from reference_impl.atomic import write_text_atomic
from reference_impl.errors import InputError
from workloads.request import Request

SCHEMA_PATH = Path(__file__).parent / "schemas" / "request.schema.json"
_FIELDS = ("req_id", "arrival_s", "prompt_len", "output_len", "source")
_FIELD_SET = frozenset(_FIELDS)


@lru_cache(maxsize=1)
def _validator() -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(json.loads(SCHEMA_PATH.read_text()))


def dumps_request(req: Request) -> str:
    """One JSON line; equal to json.dumps of the fields in order (float repr is json's), only faster."""
    if not math.isfinite(req.arrival_s):
        raise InputError(f"request {req.req_id}: arrival_s must be finite to be saved, got {req.arrival_s}")
    return (f'{{"req_id": {int(req.req_id)}, "arrival_s": {float(req.arrival_s)!r}, "prompt_len": {int(req.prompt_len)}, '
            f'"output_len": {int(req.output_len)}, "source": {json.dumps(req.source)}}}')


def save_jsonl(path: str | os.PathLike, requests: Iterable[Request]) -> None:
    """Write requests to `path` atomically: a temp file beside it, then os.replace."""
    path = Path(path)
    text = "".join(dumps_request(req) + "\n" for req in requests)
    write_text_atomic(path, text, make_dirs=False)


def _is_valid(obj) -> bool:
    """The schema's constraints checked directly (jsonschema is 30x slower; it words the error)."""
    if type(obj) is not dict or obj.keys() != _FIELD_SET:
        return False
    req_id, arrival_s, prompt_len, output_len = obj["req_id"], obj["arrival_s"], obj["prompt_len"], obj["output_len"]
    return (type(req_id) is int and req_id >= 0 and type(prompt_len) is int and prompt_len >= 1
            and type(output_len) is int and output_len >= 1 and type(obj["source"]) is str
            and type(arrival_s) in (int, float) and 0 <= arrival_s < math.inf)


def load_jsonl(path: str | os.PathLike) -> list[Request]:
    """Read a workload file; any bad line raises InputError naming the file and line."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"{path}: no such workload file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read ({exc.__class__.__name__})") from None
    if text and not text.endswith("\n"):
        raise InputError(f"{path}: last line is cut off (no trailing newline); the file looks truncated")
    requests = []
    validator = _validator()
    for lineno, line in enumerate(text.splitlines(), start=1):
        where = f"{path}:{lineno}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"{where}: not valid JSON ({exc.msg})") from None
        if not _is_valid(obj):
            error = next(iter(validator.iter_errors(obj)), None)
            if error is None:
                raise InputError(f"{where}: arrival_s must be a finite number")
            field = ".".join(str(p) for p in error.path) or "line"
            raise InputError(f"{where}: {field}: {error.message}")
        requests.append(Request(**obj))
    return requests
