"""A step's inputs as arrays, built once a step from the control plane's tables without per-token Python loops.

`token_arrays`: the input ids, positions and last-token rows of the step's sequences (numpy, vectorised over
sequences). `Locations`: where each (instance, tier) location's blocks live (a storage tensor and a block offset
in it), fixed for a backend's life. `BlockArrays`: every rBlock of the step's sequences as flat arrays (sequence,
index in its table, location, storage address), kept per request between steps and rebuilt only when its table
changed (a list comparison, in C). `stage` moves an array to the device: pinned host memory and a copy that does
not block on CUDA, a view on CPU.
"""
import itertools
from dataclasses import dataclass

import numpy as np
import torch


@dataclass(frozen=True, slots=True)
class TokenArrays:
    token_ids: np.ndarray  # [T] fed this step, flattened
    positions: np.ndarray  # [T]
    num_tokens: np.ndarray  # [S] length of each sequence after the step
    num_new: np.ndarray  # [S] tokens each sequence feeds
    last: np.ndarray  # [S] row of each sequence's last token in the step
    sampled: np.ndarray | None = None  # sequences whose next token this step samples (None: all)
    is_mixed: bool = False  # a chunked step: some sequences feed a prompt chunk (num_new > 1), the others decode


def token_arrays(seqs, is_prefill: bool, chunked: bool = False) -> TokenArrays:
    """The step's tokens: a prefill feeds whole sequences, a decode each sequence's last token. `chunked`: the
    scheduler may have given some sequences a prompt chunk (`chunk_tokens`) in a decode step."""
    num_seqs = len(seqs)
    if chunked and not is_prefill and any(s.chunk_tokens for s in seqs):
        return chunk_arrays(seqs)
    num_tokens = np.fromiter((s.num_tokens for s in seqs), np.int64, num_seqs)
    if is_prefill:
        num_new = num_tokens
        ids = np.fromiter(itertools.chain.from_iterable(itertools.chain(s.prompt_ids, s.output_ids) for s in seqs),
                          np.int64, int(num_tokens.sum()))
    else:
        ids = np.fromiter((s.output_ids[-1] if s.output_ids else s.prompt_ids[-1] for s in seqs), np.int64, num_seqs)
        return TokenArrays(ids, num_tokens - 1, num_tokens, np.ones(num_seqs, np.int64), np.arange(num_seqs))
    ends = np.cumsum(num_new)
    positions = np.arange(ids.shape[0]) + np.repeat(num_tokens - ends, num_new)
    return TokenArrays(ids, positions, num_tokens, num_new, ends - 1)


def chunk_arrays(seqs) -> TokenArrays:
    """A chunked step: a sequence with `chunk_tokens` feeds that chunk of its prompt (after the chunks already
    prefilled; `prefill_left` tokens are still to come after it), the others their last token. Only sequences
    whose prompt ends in this step sample a token."""
    num_seqs = len(seqs)
    end = np.fromiter((s.num_tokens - s.prefill_left for s in seqs), np.int64, num_seqs)
    num_new = np.fromiter((s.chunk_tokens or 1 for s in seqs), np.int64, num_seqs)
    starts = (end - num_new).tolist()
    ids = np.fromiter(itertools.chain.from_iterable(
        itertools.islice(itertools.chain(s.prompt_ids, s.output_ids), a, a + n)
        for s, a, n in zip(seqs, starts, num_new.tolist())), np.int64, int(num_new.sum()))
    ends = np.cumsum(num_new)
    positions = np.arange(ids.shape[0]) + np.repeat(end - ends, num_new)
    sampled = np.fromiter((i for i, s in enumerate(seqs) if not s.prefill_left), np.int64)
    return TokenArrays(ids, positions, end, num_new, ends - 1, sampled if len(sampled) < num_seqs else None, True)


def stage(array: np.ndarray, device: torch.device) -> torch.Tensor:
    """A host array as a tensor on `device`: a view on CPU; pinned and copied without blocking on CUDA."""
    tensor = torch.from_numpy(np.ascontiguousarray(array))
    if device.type != "cuda":
        return tensor
    return tensor.pin_memory().to(device, non_blocking=True)


class Locations:
    """Codes of the (inst_id, tier) locations of a set of caches and the storage each lives in: `storage` maps a
    location to (storage key, block offset) into `shared[key]` (locations on one device share a tensor); without
    it each location is its own storage."""

    def __init__(self, caches: dict, storage: dict | None = None, shared: dict | None = None):
        self.locs = sorted(caches)
        self.code = {loc: i for i, loc in enumerate(self.locs)}
        if storage:
            self.keys = sorted({storage[loc][0] for loc in self.locs})
            self.key_of = np.array([self.keys.index(storage[loc][0]) for loc in self.locs], np.int64)
            self.offset = np.array([storage[loc][1] for loc in self.locs], np.int64)
            self.key_caches = [shared[key] for key in self.keys]
        else:
            self.keys = list(self.locs)
            self.key_of = np.arange(len(self.locs), dtype=np.int64)
            self.offset = np.zeros(len(self.locs), np.int64)
            self.key_caches = [caches[loc] for loc in self.locs]
        self.caches = caches


class TableCache:
    """Per request: its table's (location codes, addresses), rebuilt only when the table changed."""

    def __init__(self):
        self.entries: dict = {}

    def arrays(self, key, table, code: dict) -> tuple[np.ndarray, np.ndarray]:
        entry = self.entries.get(key)
        if entry is not None and entry[0] == table:  # (unchanged blocks are the same objects: pointer compares)
            return entry[1], entry[2]
        done = len(entry[0]) if entry is not None and table[:len(entry[0])] == entry[0] else 0  # appended to
        tail = table[done:]
        locs = np.fromiter((code[(b.inst_id, b.device)] for b in tail), np.int64, len(tail))
        addresses = np.fromiter((b.address for b in tail), np.int64, len(tail))
        if done:
            locs, addresses = np.concatenate((entry[1], locs)), np.concatenate((entry[2], addresses))
        self.entries[key] = (list(table), locs, addresses)
        return locs, addresses

    def keep_only(self, keys) -> None:
        """Forget requests not in `keys` (finished ones)."""
        keys = set(keys)
        for key in [k for k in self.entries if k not in keys]:
            del self.entries[key]


@dataclass(frozen=True, slots=True)
class BlockArrays:
    seq: np.ndarray  # [B] sequence of each block
    index: np.ndarray  # [B] block index in its sequence's table
    loc: np.ndarray  # [B] location code
    key: np.ndarray  # [B] storage key code
    address: np.ndarray  # [B] block address in its storage (location offset included)
    start: np.ndarray  # [S] first block of each sequence


def block_arrays(tables, locations: Locations, cache: TableCache | None = None, keys=None) -> BlockArrays:
    """Every block of `tables` as flat arrays; `cache` and `keys` (one per table) reuse unchanged tables' arrays."""
    if cache is None:
        cache, keys = TableCache(), range(len(tables))
    per_seq = [cache.arrays(k, t, locations.code) for k, t in zip(keys, tables)]
    counts = np.fromiter((len(t) for t in tables), np.int64, len(tables))
    starts = np.cumsum(counts) - counts
    if per_seq and counts.sum():
        loc = np.concatenate([p[0] for p in per_seq])
        address = np.concatenate([p[1] for p in per_seq]) + locations.offset[loc]
    else:
        loc = address = np.zeros(0, np.int64)
    seq = np.repeat(np.arange(len(tables)), counts)
    return BlockArrays(seq, np.arange(loc.shape[0]) - starts[seq], loc, locations.key_of[loc], address, starts)
