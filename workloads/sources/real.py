import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import IO

import numpy as np

from reference_impl.errors import InputError
from workloads.sources.json_stream import iter_json_array


@dataclass(slots=True, eq=False)  # hashed by identity: cached fits key on it
class RealLengths:
    """Token counts of real requests: prompt_lens [n], output_lens [n], ids [n], and where they came from."""

    name: str
    prompt_lens: np.ndarray
    output_lens: np.ndarray
    ids: list[str]

    @property
    def context_lens(self) -> np.ndarray:
        return self.prompt_lens + self.output_lens

    def __len__(self) -> int:
        return len(self.ids)


def build(name: str, rows: list[tuple[str, int, int]]) -> RealLengths:
    rows = [(rid, p, o) for rid, p, o in rows if p >= 1 and o >= 1]
    return RealLengths(
        name=name,
        prompt_lens=np.array([p for _, p, _ in rows], dtype=np.int64),
        output_lens=np.array([o for _, _, o in rows], dtype=np.int64),
        ids=[rid for rid, _, _ in rows],
    )


def load_records_file(path: str | os.PathLike, name: str, count, *,
                      lengths_from_records: Callable[[str, Iterable, object], RealLengths],
                      read_jsonl: Callable[[IO[str], str], Iterable], empty_message: str,
                      limit: int | None = None) -> RealLengths:
    """Records of a local .jsonl file (read by `read_jsonl`) or .json array (read tolerantly) -> lengths."""
    try:
        with open(path, encoding="utf-8") as fp:
            if str(path).endswith(".jsonl"):
                records = read_jsonl(fp, str(path))
            else:
                records = iter_json_array(fp, limit=limit, name=str(path))
            lengths = lengths_from_records(name, records, count)
    except FileNotFoundError:
        raise InputError(f"{path}: no such source file") from None
    except UnicodeDecodeError:
        raise InputError(f"{path}: not UTF-8 text") from None
    if len(lengths) == 0:
        raise InputError(f"{path}: {empty_message}")
    return lengths
