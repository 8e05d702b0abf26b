"""Write files so that a reader never sees half of one: a temp file beside the target, then a rename.

`check_writable_file` / `check_writable_dir` let a command find an unwritable output before it starts the work.
"""
import json
import math
import os
import tempfile
from pathlib import Path

from reference_impl.errors import InputError


def why_not_writable(directory: str | os.PathLike) -> str | None:
    """Why files cannot be written in `directory` (existing, or created with its parents), or None; creates nothing."""
    existing = Path(directory)
    while not existing.exists() and existing != existing.parent:
        if existing.is_symlink():
            return f"{existing} is a broken link"
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing} is a file, not a folder"
    try:  # a real write, not os.access: root, read-only mounts and /proc all answer it truthfully
        fd, probe = tempfile.mkstemp(dir=existing, prefix=".write-check.")
    except OSError as exc:
        return f"cannot write in {existing} ({exc.strerror})"
    os.close(fd)
    os.unlink(probe)
    return None


def check_writable_dir(directory: str | os.PathLike, what: str = "output folder") -> Path:
    """InputError unless `directory` is a writable folder or could be created."""
    reason = why_not_writable(directory)
    if reason:
        raise InputError(f"{what} {directory}: {reason}")
    return Path(directory)


def check_writable_file(path: str | os.PathLike, what: str = "output file", *, make_dirs: bool = True) -> Path:
    """InputError unless `path` can be written (its folder existing, or creatable when make_dirs)."""
    path = Path(path)
    if path.is_dir():
        raise InputError(f"{what} {path} is a folder; give a file name")
    reason = why_not_writable(path.parent)
    if reason:
        raise InputError(f"{what} {path}: {reason}")
    if not make_dirs and not path.parent.is_dir():
        raise InputError(f"{what} {path}: folder {path.parent} does not exist")
    return path


def umask_file_mode() -> int:
    """The mode a plain open() gives a new file (0666 less the umask); mkstemp alone makes 0600."""
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


def write_text_atomic(path: str | os.PathLike, text: str, *, make_dirs: bool = True) -> Path:
    """Write `text` to `path` (UTF-8, "\\n" newlines, mode from the umask); with make_dirs=False a missing folder
    is an InputError."""
    path = Path(path)
    directory = path.parent
    if not directory.is_dir():
        if not make_dirs:
            raise InputError(f"{path}: folder {directory} does not exist")
        check_writable_dir(directory)
        directory.mkdir(parents=True, exist_ok=True)
    try:
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise InputError(f"cannot write {path} ({exc.strerror})") from None
    try:
        os.fchmod(fd, umask_file_mode())
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def strict_json(obj):
    """`obj` with every non-finite float as the string "inf", "-inf" or "nan" (float() reads them back): strict JSON
    that any parser reads, where Python's json would write the non-standard Infinity and NaN."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return "nan" if math.isnan(obj) else ("inf" if obj > 0 else "-inf")
    if isinstance(obj, dict):
        return {k: strict_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [strict_json(v) for v in obj]
    return obj


def write_json_atomic(path: str | os.PathLike, obj, *, make_dirs: bool = True, strict: bool = True) -> Path:
    """`obj` as indented JSON, strict (strict_json) unless `strict` is False (Python's own dialect, for files only
    this project reads back and checksums as written)."""
    text = json.dumps(strict_json(obj), indent=2, allow_nan=False) if strict else json.dumps(obj, indent=2)
    return write_text_atomic(path, text + "\n", make_dirs=make_dirs)
