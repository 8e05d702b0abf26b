"""Workload files: one JSON object per line (schemas/request.schema.json), written atomically.

save_jsonl(load_jsonl(f)) reproduces a file written by save_jsonl byte for byte: fixed key order,
fixed separators, floats written with repr (shortest round-tripping form).
"""
import json
import os
import tempfile
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path

import jsonschema

from reference_impl.errors import InputError
from workloads.request import Request

SCHEMA_PATH = Path(__file__).parent / "schemas" / "request.schema.json"
_FIELDS = ("req_id", "arrival_s", "prompt_len", "output_len", "source")


@lru_cache(maxsize=1)
def _validator() -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(json.loads(SCHEMA_PATH.read_text()))


def dumps_request(req: Request) -> str:
    return json.dumps({name: getattr(req, name) for name in _FIELDS}, separators=(", ", ": "), allow_nan=False)


def save_jsonl(path: str | os.PathLike, requests: Iterable[Request]) -> None:
    """Write requests to `path` atomically: a temp file beside it, then os.replace."""
    path = Path(path)
    text = "".join(dumps_request(req) + "\n" for req in requests)
    write_text_atomic(path, text)


def write_text_atomic(path: Path, text: str) -> None:
    directory = path.parent if str(path.parent) else Path(".")
    if not directory.is_dir():
        raise InputError(f"{path}: directory {directory} does not exist")
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as fp:
            fp.write(text)
        os.replace(tmp_name, path)
    except BaseException:
        if os.path.exists(tmp_name):
            os.unlink(tmp_name)
        raise


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
        error = next(iter(validator.iter_errors(obj)), None)
        if error is not None:
            field = ".".join(str(p) for p in error.path) or "line"
            raise InputError(f"{where}: {field}: {error.message}")
        requests.append(Request(**obj))
    return requests
