"""Workload files: one JSON object per line (schemas/request.schema.json), written atomically.

save_jsonl(load_jsonl(f)) reproduces a file written by save_jsonl byte for byte: fixed key order,
fixed separators, floats written with repr (shortest round-tripping form).
"""
import json
import os
from collections.abc import Iterable
from pathlib import Path

from reference_impl.atomic import write_text_atomic
from reference_impl.errors import InputError
from workloads.request import Request

SCHEMA_PATH = Path(__file__).parent / "schemas" / "request.schema.json"
_FIELDS = ("req_id", "arrival_s", "prompt_len", "output_len", "source")
_FIELD_SET = frozenset(_FIELDS)
MAX_LEN_TOKENS = 2**31 - 1  # block tables and sequence lengths are int32 in the kernels
MAX_ARRIVAL_S = 1e9  # about 32 years: beyond it a time is a mistake (e.g. --rate 1e-300), not a workload


def dumps_request(req: Request) -> str:
    """One JSON line; equal to json.dumps of the fields in order (float repr is json's), only faster."""
    if not 0 <= req.arrival_s <= MAX_ARRIVAL_S:
        raise InputError(f"request {req.req_id}: arrival_s {req.arrival_s:g} is beyond {MAX_ARRIVAL_S:g} s; "
                         "raise the rate")
    return (f'{{"req_id": {int(req.req_id)}, "arrival_s": {float(req.arrival_s)!r}, "prompt_len": {int(req.prompt_len)}, '
            f'"output_len": {int(req.output_len)}, "source": {json.dumps(req.source)}}}')


def save_jsonl(path: str | os.PathLike, requests: Iterable[Request]) -> None:
    """Write requests to `path` atomically: a temp file beside it, then os.replace."""
    path = Path(path)
    text = "".join(dumps_request(req) + "\n" for req in requests)
    write_text_atomic(path, text, make_dirs=False)


def _problem(obj) -> str | None:
    """What is wrong with one parsed line, naming the field, or None (the schema's rules plus the length cap)."""
    if type(obj) is not dict:
        return f"expected a JSON object with fields {', '.join(_FIELDS)}"
    if obj.keys() != _FIELD_SET:
        missing, unknown = _FIELD_SET - obj.keys(), obj.keys() - _FIELD_SET
        return (f"missing field(s) {', '.join(sorted(missing))}" if missing
                else f"unknown field(s) {', '.join(sorted(unknown))}; fields are {', '.join(_FIELDS)}")
    req_id = obj["req_id"]
    if type(req_id) is not int or req_id < 0:
        return f"req_id must be an integer >= 0, got {json.dumps(req_id)}"
    for name in ("prompt_len", "output_len"):
        value = obj[name]
        if type(value) is not int:
            return f"{name} must be an integer number of tokens, got {json.dumps(value)}"
        if not 1 <= value <= MAX_LEN_TOKENS:
            return f"{name} {_short(value)} is out of range: 1 to {MAX_LEN_TOKENS} tokens"
    arrival_s = obj["arrival_s"]
    if type(arrival_s) not in (int, float) or not 0 <= arrival_s <= MAX_ARRIVAL_S:
        return f"arrival_s must be a number of seconds from 0 to {MAX_ARRIVAL_S:g}, got {json.dumps(arrival_s)}"
    if type(obj["source"]) is not str:
        return f"source must be a string, got {json.dumps(obj['source'])}"
    return None


def _short(value: int) -> str:
    text = str(value)
    return text if len(text) <= 15 else f"{text[0]}.{text[1:4]}e{len(text) - 1}"


def _is_valid(obj) -> bool:
    return _problem(obj) is None


def load_jsonl(path: str | os.PathLike, progress=None) -> list[Request]:
    """Read a workload file; a bad line, a repeated req_id or a file without requests raises InputError naming
    the file and line. `progress(lines, total=, desc=)` may wrap the line loop (a progress bar)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"{path}: no such workload file") from None
    except IsADirectoryError:
        raise InputError(f"{path}: is a folder, not a workload file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read ({exc.__class__.__name__})") from None
    if not text.strip():
        raise InputError(f"{path}: empty workload file (no requests)")
    if not text.endswith("\n"):
        raise InputError(f"{path}: last line is cut off (no trailing newline); the file looks truncated")
    lines = text.splitlines()
    requests, first_line = [], {}
    for lineno, line in enumerate(lines if progress is None else progress(lines, total=len(lines), desc=str(path)),
                                  start=1):
        where = f"{path}:{lineno}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"{where}: not valid JSON ({exc.msg})") from None
        except (RecursionError, ValueError) as exc:  # nesting too deep, an integer of thousands of digits
            raise InputError(f"{where}: not valid JSON ({exc.__class__.__name__})") from None
        problem = _problem(obj)
        if problem:
            raise InputError(f"{where}: {problem}")
        seen = first_line.setdefault(obj["req_id"], lineno)
        if seen != lineno:
            raise InputError(f"{where}: req_id {obj['req_id']} repeats line {seen}; every request needs its own id")
        requests.append(Request(**obj))
    return requests
