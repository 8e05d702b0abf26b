"""The coefficient document on disk: deterministic text, atomic writes, schema-checked loads."""
import json
import re
from functools import cache
from pathlib import Path

from reference_impl.atomic import check_writable_file, write_text_atomic
from reference_impl.errors import InputError

DATA_DIR = Path(__file__).with_name("data")
DEFAULT_PATH = DATA_DIR / "vidur_distserve.json"
SCHEMA_PATH = Path(__file__).with_name("schema.json")
_FLAT_LIST = re.compile(r"\[([^\[\]{}\"]*)\]")


def dumps(doc: dict) -> str:
    """Sorted keys, one key per line, number lists on one line: the same bytes for the same fit."""
    text = json.dumps(doc, indent=1, sort_keys=True, ensure_ascii=True)
    return _FLAT_LIST.sub(lambda m: "[" + ", ".join(t.strip() for t in m.group(1).split(",") if t.strip()) + "]",
                          text) + "\n"


def check_out_path(path) -> Path:
    return check_writable_file(path, "--out", make_dirs=False)


def write_atomic(path, text: str) -> None:
    write_text_atomic(check_out_path(path), text, make_dirs=False)


@cache
def _schema() -> dict:
    return json.loads(SCHEMA_PATH.read_text())


def validate(doc: dict, where: str) -> dict:
    try:
        import jsonschema
    except ImportError:  # a bare GPU machine running `repro validate-gpu` (a project install always has it)
        return doc
    try:
        jsonschema.validate(doc, _schema())
    except jsonschema.ValidationError as exc:
        path = "/".join(str(p) for p in exc.absolute_path) or "top level"
        raise InputError(f"{where} is not a calibration file: at {path}: {exc.message}") from None
    return doc


@cache
def _load(resolved: str, mtime_ns: int) -> dict:
    try:
        doc = json.loads(Path(resolved).read_text())
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read calibration file {resolved}: {exc}") from None
    return validate(doc, resolved)


def load(path=None) -> dict:
    """The coefficient document at `path` (default: the committed A100/H100 fit)."""
    path = Path(path) if path is not None else DEFAULT_PATH
    if not path.is_file():
        raise InputError(f"calibration file {path} does not exist (make one with `repro calibrate` or `repro profile`)")
    return _load(str(path.resolve()), path.stat().st_mtime_ns)
