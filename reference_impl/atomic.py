"""Write files so that a reader never sees half of one: a temp file beside the target, then a rename."""
import json
import os
import tempfile
from pathlib import Path

from reference_impl.errors import InputError


def write_text_atomic(path: str | os.PathLike, text: str, *, make_dirs: bool = True) -> Path:
    """Write `text` to `path` (UTF-8, "\\n" newlines); with make_dirs=False a missing folder is an InputError."""
    path = Path(path)
    directory = path.parent
    if not directory.is_dir():
        if not make_dirs:
            raise InputError(f"{path}: folder {directory} does not exist")
        directory.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_json_atomic(path: str | os.PathLike, obj, *, make_dirs: bool = True) -> Path:
    return write_text_atomic(path, json.dumps(obj, indent=2) + "\n", make_dirs=make_dirs)
