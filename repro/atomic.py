"""Write files so that a reader never sees half of one: write a temp file beside it, then rename."""
import json
import os
import tempfile
from pathlib import Path


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    return path


def write_json_atomic(path: str | os.PathLike, obj) -> Path:
    return write_text_atomic(path, json.dumps(obj, indent=2, sort_keys=False) + "\n")
