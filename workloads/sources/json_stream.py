"""Tolerant streaming parse of a top-level JSON array whose tail may be cut off."""
import json
from collections.abc import Iterator
from typing import IO

from reference_impl.errors import InputError

_CHUNK_CHARS = 1 << 20
_DECODER = json.JSONDecoder()


def iter_json_array(fp: IO[str], *, limit: int | None = None, name: str = "input") -> Iterator[object]:
    """Yield the complete elements of a JSON array read from `fp`, stopping quietly at a cut-off tail.

    A plain json.load fails on a truncated file; here every element that closed before the cut is kept.
    """
    buf = fp.read(_CHUNK_CHARS)
    pos = _skip_ws(buf, 0)
    if pos >= len(buf) or buf[pos] != "[":
        raise InputError(f"{name}: expected a JSON array ('[' at the start)")
    pos += 1
    count = 0
    at_eof = False
    while limit is None or count < limit:
        pos = _skip_ws_and_commas(buf, pos)
        if pos < len(buf) and buf[pos] == "]":
            return
        try:
            item, end = _DECODER.raw_decode(buf, pos)
            after = _skip_ws(buf, end)
        except json.JSONDecodeError:
            after = None
        if after is None or after == len(buf):
            # Incomplete, or complete only if what follows is ',' or ']': read more, or stop at the cut.
            if at_eof:
                return
            more = fp.read(_CHUNK_CHARS)
            at_eof = not more
            buf = buf[pos:] + more
            pos = 0
            continue
        if buf[after] not in ",]":
            raise InputError(f"{name}: malformed JSON array after element {count}")
        yield item
        count += 1
        pos = after


def _skip_ws(buf: str, pos: int) -> int:
    while pos < len(buf) and buf[pos] in " \t\r\n":
        pos += 1
    return pos


def _skip_ws_and_commas(buf: str, pos: int) -> int:
    while pos < len(buf) and buf[pos] in " \t\r\n,":
        pos += 1
    return pos
