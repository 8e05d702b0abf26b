"""The store of finished points: a folder of one JSON file per point, named by its key (repro/serving/keys.py).

An interrupted run finds the points it finished; a rerun with one changed --param, or another experiment with the
same points (sensitivity's default arm and e2e's probes), runs only the points it lacks. Each entry is written
whole (a temp file, then os.replace) and holds its key's fields and a sha256 of its point: an entry that does not
parse, names another key or fails its checksum is recomputed and overwritten, never read.

Where: `--param store=PATH` (or `off`), else $REPRO_POINT_STORE, else DEFAULT_DIR (under results/, ignored by git).
"""
import json
import os
from dataclasses import dataclass
from pathlib import Path

from reference_impl.atomic import write_json_atomic
from repro.serving.keys import canonical, sha256_text

DEFAULT_DIR = "results/.points"
ENV = "REPRO_POINT_STORE"
OFF = "off"


@dataclass(frozen=True, slots=True)
class Stored:
    point: object  # a serving point (a dict), or a job's result: whatever JSON holds
    cpu_s: float  # CPU seconds the point took where it ran


@dataclass(frozen=True, slots=True)
class PointStore:
    folder: Path

    def path(self, key: str) -> Path:
        return self.folder / key[:2] / f"{key}.json"

    def get(self, key: str) -> Stored | None:
        """The stored point of `key`, or None (missing, or an entry that cannot be trusted)."""
        try:
            entry = json.loads(self.path(key).read_text())
            point = entry["point"]
            if entry["key"] != key or entry["point_sha256"] != sha256_text(canonical(point)):
                return None
            return Stored(point, float(entry["cpu_s"]))
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def put(self, key: str, fields: dict, point: dict, cpu_s: float) -> None:
        write_json_atomic(self.path(key), {"key": key, "fields": fields, "point": point, "cpu_s": cpu_s,
                                           "point_sha256": sha256_text(canonical(point))}, strict=False)


def store_location(param: str | None) -> str:
    """The store's folder (or OFF): the --param, else the environment, else DEFAULT_DIR."""
    return param or os.environ.get(ENV) or DEFAULT_DIR


def open_store(param: str | None) -> PointStore | None:
    where = store_location(param)
    return None if where.strip().lower() == OFF else PointStore(Path(where))
