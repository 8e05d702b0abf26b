"""Sequence-parallel prefill over instances (LoongServe's prompt over several instances; a design asks for it with
Placement.segments, which places each prompt's rBlocks in one run per member of its prefill group), for both real
backends: on Ray each member is an actor and the plane torch.distributed (backends/ray: exchange.py, serve.py); on
the local backend each member a thread of the one process and the plane `LocalPlane`.

A prefill step whose prompts' rBlocks lie in one contiguous run per instance (the segments: `plan_segments`) is
computed by the segments' instances at once: the home gives each other member the plan and every member, the home
included, runs the model on its own segments' tokens through every layer (`Segments.run`). Per layer a member
writes its segments' K/V into its own rBlocks, sends that K/V to each member holding a later segment of the same
prompt and receives the earlier segments' K/V (one message per pair of members), then attends each segment's queries over its own K/V (causal) and over each earlier
segment's (whole), the partials merged with ScaleReduce: exact causal attention over the prompt so far. After the
last layer the member of each prompt's last segment sends that token's hidden state (after the final norm) to the
home, which runs the LM head on it and samples. Every member so holds exactly its segment's KV afterwards.
"""
import math
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from reference_impl.control.rblock import DEVICE
from reference_impl.kernels import scale_reduce
from reference_impl.model.kv_layer import causal_partial_attention

PLANE_TIMEOUT_S = 60.0  # a local member that waits this long on another has lost it (it raised)


def merge(parts):
    """Partials (out, lse) of one set of query rows over disjoint keys, merged exactly (ScaleReduce)."""
    if len(parts) == 1:
        return parts[0][0]
    return scale_reduce(torch.stack([o for o, _ in parts]), torch.stack([lse for _, lse in parts]))[0]


@dataclass(frozen=True, slots=True)
class Segment:
    """Tokens [start, end) of one prompt, computed on instance `member`, their KV in its rBlocks `addresses`."""
    member: int
    start: int
    end: int
    token_ids: np.ndarray
    addresses: np.ndarray  # device-tier blocks, in token order, the first holding token `start`

    @property
    def num_tokens(self) -> int:
        return self.end - self.start


@dataclass(frozen=True, slots=True)
class SegmentPlan:
    """A sequence-parallel prefill step of home `home`: each prompt of its batch as its segments in token order."""
    home: int
    segments: tuple[tuple[Segment, ...], ...]

    @property
    def members(self) -> set[int]:
        return {seg.member for segs in self.segments for seg in segs}

    @property
    def degrees(self) -> list[int]:
        """Each prompt's number of segments (its prefill group's size)."""
        return [len(segs) for segs in self.segments]

    def last_members(self) -> list[int]:
        return [segs[-1].member for segs in self.segments]


def plan_segments(home: int, seqs, tables, block_size: int) -> SegmentPlan | None:
    """The segments of a prefill batch (`tables`: each prompt's rBlocks in token order), or None when it is not one
    for this path: a block off the device tier, an instance holding two runs of one prompt, or every prompt whole on
    the home."""
    plan = []
    for seq, table in zip(seqs, tables):
        ids = np.fromiter((*seq.prompt_ids, *seq.output_ids), np.int64, seq.num_tokens)
        runs: list[tuple[int, int, list[int]]] = []  # (inst, first block, addresses)
        for j, block in enumerate(table):
            if block.device != DEVICE:
                return None
            if runs and runs[-1][0] == block.inst_id:
                runs[-1][2].append(block.address)
            else:
                runs.append((block.inst_id, j, [block.address]))
        if len({r[0] for r in runs}) < len(runs):
            return None
        segs = []
        for inst, first, addresses in runs:
            start, end = first * block_size, min(seq.num_tokens, (first + len(addresses)) * block_size)
            if end <= start:
                return None
            segs.append(Segment(inst, start, end, ids[start:end], np.asarray(addresses, np.int64)))
        plan.append(tuple(segs))
    if all(len(segs) == 1 and segs[0].member == home for segs in plan):
        return None
    return SegmentPlan(home, tuple(plan))


class Segments:
    """One member's part of a sequence-parallel prefill: its segments, what it sends and receives each layer."""

    def __init__(self, plan: SegmentPlan, me: int, model, caches: dict, plane, block_size: int, device,
                 tag: Callable[[int], int]):
        """caches: tier -> (k, v) of this member; plane: `post(sends, recvs, tag) -> works` by inst_id (Ray's
        DataPlane, a LocalPlane's member); tag(layer): the tag of that layer's messages (layer = the number of
        layers: the last hidden states)."""
        c = model.config
        self.plan, self.me, self.model, self.caches, self.plane, self.tag = plan, me, model, caches, plane, tag
        self.hkv, self.d, self.scale = c.num_kv_heads, c.head_dim, 1.0 / math.sqrt(c.head_dim)
        self.num_layers, self.device, self.dtype = c.num_layers, torch.device(device), model.dtype
        self.messaging_s = 0.0
        self.mine: list[tuple[int, Segment, int]] = []  # (prompt, segment, its first row here)
        row = 0
        for s, segs in enumerate(plan.segments):
            for seg in segs:
                if seg.member == me:
                    self.mine.append((s, seg, row))
                    row += seg.num_tokens
        self.num_rows = row
        # rows sent to each later member (prompt order), and each earlier segment's place in what comes from its member
        self.send_rows: dict[int, list[int]] = {}
        self.recv_counts: dict[int, int] = {}
        self.earlier: dict[int, list[tuple[int, int, Segment]]] = {}  # prompt -> (sender, first row there, segment)
        for s, seg, row in self.mine:
            segs = plan.segments[s]
            at = segs.index(seg)
            for later in segs[at + 1:]:
                self.send_rows.setdefault(later.member, []).extend(range(row, row + seg.num_tokens))
            for before in segs[:at]:
                first = self.recv_counts.get(before.member, 0)
                self.earlier.setdefault(s, []).append((before.member, first, before))
                self.recv_counts[before.member] = first + before.num_tokens
        index = self._tensor
        self.send_idx = {m: index(np.asarray(rows)) for m, rows in self.send_rows.items()}
        if self.mine:
            positions = np.concatenate([np.arange(seg.start, seg.end) for _, seg, _ in self.mine])
            blocks = np.concatenate([seg.addresses[(np.arange(seg.start, seg.end) - seg.start) // block_size]
                                     for _, seg, _ in self.mine])
            self.ids = index(np.concatenate([seg.token_ids for _, seg, _ in self.mine]))
            self.positions = index(positions)
            self.w_address, self.w_offset = index(blocks), index(positions % block_size)

    def _tensor(self, array):
        return torch.from_numpy(np.ascontiguousarray(array, np.int64)).to(self.device)

    def _wait(self, works) -> None:
        t0 = time.perf_counter()
        for work in works:
            work.wait()
        self.messaging_s += time.perf_counter() - t0

    def attend(self, layer: int, q, k, v):
        """The model's attention for this member's rows (q [T, Hq, D], k/v [T, Hkv, D])."""
        k_cache, v_cache = self.caches[DEVICE]
        k_cache[layer, self.w_address, self.w_offset] = k.to(k_cache.dtype)
        v_cache[layer, self.w_address, self.w_offset] = v.to(v_cache.dtype)
        sends = {m: torch.stack([k[idx], v[idx]]) for m, idx in self.send_idx.items()}
        recvs = {m: torch.empty(2, n, self.hkv, self.d, dtype=k.dtype, device=self.device)
                 for m, n in self.recv_counts.items()}
        self._wait(self.plane.post(sends, recvs, self.tag(layer)))
        out = torch.empty_like(q)
        for s, seg, row in self.mine:
            rows = slice(row, row + seg.num_tokens)
            pos_q = self.positions[rows]
            parts = [causal_partial_attention(q[rows], k[rows], v[rows], pos_q, pos_q, self.scale)]
            for sender, first, before in self.earlier.get(s, []):
                kv = recvs[sender][:, first:first + before.num_tokens]
                pos_k = torch.arange(before.start, before.end, device=self.device)
                parts.append(causal_partial_attention(q[rows], kv[0], kv[1], pos_q, pos_k, self.scale))
            out[rows] = merge(parts).to(q.dtype)
        return out

    def run(self, serve_mail=lambda: None) -> dict[int, torch.Tensor]:
        """This member's segments through every layer; the final hidden state of each prompt whose last segment is
        here (prompt -> [hidden]). `serve_mail` runs around each layer's attention (a loop's mailbox)."""
        if not self.mine:
            return {}

        def attend(layer, q, k, v):
            serve_mail()
            out = self.attend(layer, q, k, v)
            serve_mail()
            return out
        hidden = self.model.forward(self.ids, self.positions, attend)
        return {s: hidden[row + seg.num_tokens - 1] for s, seg, row in self.mine
                if self.plan.segments[s][-1] is seg}

    def hand_over(self, last: dict[int, torch.Tensor]) -> None:
        """A member: the last hidden states of the prompts that end here, to the home."""
        if last:
            rows = torch.stack([last[s] for s in sorted(last)])
            self._wait(self.plane.post({self.plan.home: rows}, {}, self.tag(self.num_layers)))

    def gather(self, last: dict[int, torch.Tensor], hidden_size: int) -> torch.Tensor:
        """The home: every prompt's last hidden state [S, hidden], its own and those the other members send."""
        counts: dict[int, int] = {}
        for s, m in enumerate(self.plan.last_members()):
            if m != self.me:
                counts[m] = counts.get(m, 0) + 1
        recvs = {m: torch.empty(n, hidden_size, dtype=self.dtype, device=self.device) for m, n in counts.items()}
        self._wait(self.plane.post({}, recvs, self.tag(self.num_layers)))
        taken = dict.fromkeys(recvs, 0)
        rows = []
        for s, m in enumerate(self.plan.last_members()):
            if m == self.me:
                rows.append(last[s])
            else:
                rows.append(recvs[m][taken[m]])
                taken[m] += 1
        return torch.stack(rows)


class LocalPlane:
    """The plane of members that are threads of one process: a send is queued at once, a receive waits for it."""

    def __init__(self):
        self.queues: dict[tuple, queue.SimpleQueue] = {}
        self.lock = threading.Lock()

    def _queue(self, key) -> queue.SimpleQueue:
        with self.lock:
            return self.queues.setdefault(key, queue.SimpleQueue())

    def member(self, me: int) -> "_LocalMember":
        return _LocalMember(self, me)


@dataclass(frozen=True, slots=True)
class _Receive:
    source: queue.SimpleQueue
    into: torch.Tensor

    def wait(self) -> None:
        self.into.copy_(self.source.get(timeout=PLANE_TIMEOUT_S))


@dataclass(frozen=True, slots=True)
class _LocalMember:
    plane: LocalPlane
    me: int

    def post(self, sends: dict, recvs: dict, tag: int) -> list:
        for dst, tensor in sends.items():
            self.plane._queue((self.me, dst, tag)).put(tensor.clone())
        return [_Receive(self.plane._queue((src, self.me, tag)), buf) for src, buf in recvs.items()]


def prefill_in_threads(plan: SegmentPlan, model, caches_of: Callable[[int], dict], block_size: int, device,
                       hidden_size: int) -> torch.Tensor:
    """A sequence-parallel prefill in one process: every member but the home in a thread of its own, the home in
    the caller's; every prompt's last hidden state [S, hidden] (`caches_of(inst_id)`: tier -> (k, v) there)."""
    plane, errors = LocalPlane(), []

    def member(m: int) -> None:
        try:
            with torch.inference_mode():
                part = Segments(plan, m, model, caches_of(m), plane.member(m), block_size, device, lambda layer: layer)
                part.hand_over(part.run())
        except Exception as err:  # noqa: BLE001 (re-raised in the caller's thread)
            errors.append(err)
    threads = [threading.Thread(target=member, args=(m,), daemon=True) for m in sorted(plan.members - {plan.home})]
    for t in threads:
        t.start()
    try:
        home = Segments(plan, plan.home, model, caches_of(plan.home), plane.member(plan.home), block_size, device,
                        lambda layer: layer)
        hidden = home.gather(home.run(), hidden_size)
    except queue.Empty:
        raise (errors[0] if errors else TimeoutError("a sequence-parallel member never answered")) from None
    finally:
        for t in threads:
            t.join(PLANE_TIMEOUT_S)
    if errors:
        raise errors[0]
    return hidden
