"""One home's step of DistAttention across instance actors, over the data plane (dataplane.py).

The home plans its step over its requests' block tables (`plan_step`, array operations over the step's blocks
and tokens, the tables' arrays kept per request between steps): for each location (instance) holding rBlocks of a
sequence it writes an `Ask` (arrays): the new tokens' K/V to store there and the query rows to attend with. A
chunked step decodes some sequences and prefills prompt chunks of others: a location's decode rows come first,
then the chunks' rows, each chunk attending over its prompt's K/V so far where it lies.
Each creditor gets its own Ask (and the KV block moves it takes part in) in a message from the home, and serves
it in a `DistStep` of its own (serve.py) while its loop runs its own steps. Per layer (`DistStep.attend`): the
home sends each creditor its query rows and K/V, the creditor writes the K/V and runs MicroAttention over the
rows in one call per tier, sends back `(out, lse)`, and the home merges the partials with `scale_reduce`. KV
blocks that move travel in the same step, one message per peer and layer posted at the start and awaited just
before that layer's attention. Every message of a home's step is tagged with the home (dataplane.tag), so
steps of different homes between the same two instances never match each other's messages.
"""
import math
import time
from dataclasses import dataclass, field

import numpy as np
import torch

from reference_impl.backends.ray.dataplane import MOVE, PARTIAL, QUERY, tag
from reference_impl.backends.sp_prefill import merge
from reference_impl.control.rblock import CPU, DEVICE
from reference_impl.kernels import micro_attention, scale_reduce
from reference_impl.model.kv_layer import causal_partial_attention
from reference_impl.model.step_inputs import TableCache

Pair = tuple[int, str, int, int, str, int]  # (src inst, src tier, src address, dst inst, dst tier, dst address)
TIER_OF = (CPU, DEVICE)  # a location's code is inst * 2 + tier code (so codes sort as (inst, tier) do)
_EMPTY = np.zeros(0, np.int64)


class LocationCodes(dict):
    """(inst_id, tier) -> inst_id * 2 + tier code, filled as asked (TableCache's `code`)."""

    def __missing__(self, key):
        code = self[key] = key[0] * 2 + TIER_OF.index(key[1])
        return code


@dataclass(slots=True)
class Ask:
    """What a home asks one location to do each layer, as arrays. Query rows: the decode rows first (row i of the
    decode table), then the prefill pieces' rows (pieces take consecutive rows)."""

    write_tier: np.ndarray = field(default_factory=lambda: _EMPTY)  # [W] tier code of each K/V row sent
    write_address: np.ndarray = field(default_factory=lambda: _EMPTY)  # [W] its block
    write_offset: np.ndarray = field(default_factory=lambda: _EMPTY)  # [W] its slot in the block
    decode_tier: np.ndarray = field(default_factory=lambda: _EMPTY)  # [R] tier code of each decode row
    decode_table: np.ndarray = field(default_factory=lambda: np.zeros((0, 1), np.int32))  # [R, width] addresses
    decode_lens: np.ndarray = field(default_factory=lambda: _EMPTY)  # [R] tokens each row attends over
    prefill: list[tuple[str, np.ndarray, np.ndarray, int, int]] = field(default_factory=list)
    # prefill: (tier, block indexes in the table, addresses, num_tokens after the step, num_new) per piece

    @property
    def num_rows(self) -> int:
        return len(self.decode_lens) + sum(p[4] for p in self.prefill)


@dataclass(slots=True)
class HomePlan:
    """The home's side: which of its token rows go to each location and how the answers merge."""

    asks: dict[int, Ask]  # location inst -> Ask (this instance included)
    q_rows: dict[int, np.ndarray]  # location -> this step's query rows it gets, in Ask order
    w_rows: dict[int, np.ndarray]  # location -> token rows whose K/V it stores
    merge_slots: dict[int, np.ndarray]  # decode: location -> partial slot (j * num_seqs + d) of each decode row
    pieces: list[list[tuple[int, int]]]  # prefill: per prefilling sequence, (location, first answer row) per part
    spans: list[tuple[int, int]]  # prefill: per prefilling sequence, its query rows in this step's tokens
    num_seqs: int  # decoding sequences (d above counts them in step order)
    num_partials: int
    is_prefill: bool  # every sequence prefills (a whole prompt)
    decode_rows: np.ndarray = field(default_factory=lambda: _EMPTY)  # token row of each decoding sequence


def plan_step(tables, num_tokens, num_new, block_size: int, is_prefill: bool, cache: TableCache | None = None,
              keys=None) -> HomePlan:
    """tables[i]: rBlocks of sequence i in token order; num_tokens[i] its length after the step, num_new[i] the
    tokens it feeds. A sequence feeding more than one token in a decode step prefills a prompt chunk (chunked
    prefill); the others decode. Array operations over the step's blocks and tokens, a Python loop only over the
    prefilling sequences' locations; `cache` and `keys` (one per table) reuse unchanged tables' arrays."""
    bs, num_seqs = block_size, len(tables)
    num_tokens, num_new = np.asarray(num_tokens, np.int64), np.asarray(num_new, np.int64)
    if cache is None:
        cache, keys = TableCache(), range(num_seqs)
    code = LocationCodes()
    per_seq = [cache.arrays(k, t, code) for k, t in zip(keys, tables)]
    if num_seqs == 1:
        (loc, address), = per_seq
        counts, start = np.array([len(loc)]), np.zeros(1, np.int64)
    else:
        loc, address = (np.concatenate([p[i] for p in per_seq]) for i in (0, 1))
        counts = np.fromiter((len(p[0]) for p in per_seq), np.int64, num_seqs)
        start = np.cumsum(counts) - counts
    # K/V writes: the block and slot of every new token
    ends = np.cumsum(num_new)
    pieces_of = np.ones(num_seqs, bool) if is_prefill else num_new > 1
    if pieces_of.any():
        tok_seq = np.repeat(np.arange(num_seqs), num_new)
        pos = np.arange(int(ends[-1])) + np.repeat(num_tokens - ends, num_new)
        block = start[tok_seq] + pos // bs
    else:
        pos = num_tokens - 1
        block = start + pos // bs
    w_loc = loc[block]
    order = np.argsort(w_loc // 2, kind="stable")
    w_tier, w_address, w_offset = w_loc[order] % 2, address[block[order]], pos[order] % bs
    asks, w_rows = {}, {}
    for inst, a, b in _runs(w_loc[order] // 2):
        asks[inst] = Ask(w_tier[a:b], w_address[a:b], w_offset[a:b])
        w_rows[inst] = order[a:b]
    # the blocks each sequence reads: its first ceil(num_tokens / block_size)
    needed = -(-num_tokens // bs)
    b_seq = np.repeat(np.arange(num_seqs), counts)
    b_index = np.arange(len(loc)) - start[b_seq]
    if not (counts == needed).all():
        used = b_index < needed[b_seq]
        b_seq, b_index, loc, address = b_seq[used], b_index[used], loc[used], address[used]
        start = np.cumsum(needed) - needed
    num_locs = int(loc.max()) + 1
    decodes = np.flatnonzero(~pieces_of)
    q_rows: dict[int, list] = {}
    merge_slots: dict[int, np.ndarray] = {}
    num_partials = 1
    if len(decodes):
        num_partials = _plan_decode(asks, q_rows, merge_slots, decodes, ends - 1,
                                    None if len(decodes) == num_seqs else ~pieces_of[b_seq],
                                    b_seq, b_index, loc, address, num_tokens, num_locs, bs)
    pieces, spans = [], []
    for s in np.flatnonzero(pieces_of).tolist():
        n, new, end = int(num_tokens[s]), int(num_new[s]), int(ends[s])
        lo = int(start[s])
        locs = loc[lo:lo + int(needed[s])]
        parts = []
        held = np.unique(locs).tolist()
        for c in held:
            inst = c // 2
            mine = lo + np.flatnonzero(locs == c)
            rows = q_rows.setdefault(inst, [])
            parts.append((inst, sum(len(r) for r in rows)))
            rows.append(np.arange(end - new, end))
            asks.setdefault(inst, Ask()).prefill.append((TIER_OF[c % 2], b_index[mine], address[mine], n, new))
        num_partials = max(num_partials, len(held))
        pieces.append(parts)
        spans.append((end - new, end))
    q_rows = {inst: rows[0] if len(rows) == 1 else np.concatenate(rows) for inst, rows in q_rows.items()}
    return HomePlan(asks, q_rows, w_rows, merge_slots, pieces, spans, len(decodes), num_partials, bool(is_prefill),
                    (ends - 1)[decodes])


def _group_rows(groups: np.ndarray) -> dict[int, np.ndarray]:
    """group -> the indices holding it, ascending."""
    present = np.flatnonzero(np.bincount(groups)).tolist()
    if len(present) == 1:
        return {present[0]: np.arange(len(groups))}
    return {g: np.flatnonzero(groups == g) for g in present}


def _runs(groups: np.ndarray) -> list[tuple[int, int, int]]:
    """(group, start, end) of each run of equal values of sorted `groups`."""
    cuts = (np.flatnonzero(groups[1:] != groups[:-1]) + 1).tolist()
    bounds = [0, *cuts, len(groups)]
    values = groups[bounds[:-1]].tolist()
    return list(zip(values, bounds[:-1], bounds[1:]))


def _plan_decode(asks, q_rows, merge_slots, decodes, last_row, mine, b_seq, b_index, b_loc, b_address,
                 num_tokens, num_locs: int, bs: int) -> int:
    """The decode rows of every location: one per (decoding sequence, location) pair, its blocks in table order,
    the pairs of a location by sequence then tier; the pair's partial goes to slot j * num_decodes + d (j: the
    location's rank among the sequence's). `mine`: the blocks of decoding sequences (None: all). Returns the most
    locations a sequence's blocks are at."""
    if mine is not None:
        b_seq, b_index, b_loc, b_address = b_seq[mine], b_index[mine], b_loc[mine], b_address[mine]
    pair_key = b_seq * num_locs + b_loc
    order = np.argsort((b_loc // 2) * (int(b_seq[-1]) + 1) * num_locs + pair_key, kind="stable")
    key = pair_key[order]
    new_pair = np.empty(len(key), bool)
    new_pair[0] = True
    np.not_equal(key[1:], key[:-1], out=new_pair[1:])
    first = np.flatnonzero(new_pair)
    pair = np.cumsum(new_pair) - 1
    pair_key = key[first]
    pair_seq, pair_loc = pair_key // num_locs, pair_key % num_locs
    pair_len = np.bincount(pair)
    table = np.zeros((len(first), int(pair_len.max())), np.int32)
    table[pair, np.arange(len(key)) - first[pair]] = b_address[order]
    lens = np.bincount(pair, weights=np.minimum(num_tokens[b_seq[order]] - b_index[order] * bs, bs),
                       minlength=len(first)).astype(np.int64)
    by_seq = np.argsort(pair_key, kind="stable")  # the pairs by (sequence, location): a location's rank
    rank = np.empty(len(first), np.int64)
    rank[by_seq] = np.arange(len(first)) - np.searchsorted(pair_key[by_seq] // num_locs, pair_seq[by_seq])
    d = np.searchsorted(decodes, pair_seq) if mine is not None else pair_seq  # index among the decoding sequences
    slots, rows, tier = rank * len(decodes) + d, last_row[pair_seq], pair_loc % 2
    for inst, a, b in _runs(pair_loc // 2):
        asks.setdefault(inst, Ask())
        ask = asks[inst]
        ask.decode_tier, ask.decode_table, ask.decode_lens = tier[a:b], table[a:b, :int(pair_len[a:b].max())], lens[a:b]
        q_rows[inst] = [rows[a:b]]
        merge_slots[inst] = slots[a:b]
    return int(rank.max()) + 1


class DistStep:
    """This instance's share of home `home`'s step: on the home, its plan (None when the step only moves KV); on a
    creditor serving it, the home's Ask (`debtors` = {home: ask}); on both, the KV block pairs of the step that
    this instance reads or writes."""

    def __init__(self, inst_id: int, plane, caches: dict, plan: HomePlan | None, debtors: dict, pairs: list,
                 home: int, model_config, block_size: int, dtype, device):
        c = model_config
        self.inst_id, self.plane, self.caches, self.plan, self.home = inst_id, plane, caches, plan, home
        self.messaging_s = 0.0  # waiting on the data plane's transfers
        self.block_size, self.dtype, self.device = block_size, dtype, torch.device(device)
        self.hq, self.hkv, self.d = c.num_heads, c.num_kv_heads, c.head_dim
        self.creditors = [i for i in (plan.asks if plan else {}) if i != inst_id]
        self.debtors = dict(debtors)
        jobs = dict(self.debtors)
        if plan and inst_id in plan.asks:
            jobs[inst_id] = plan.asks[inst_id]
        self._prepare_compute(jobs)
        self._prepare_rows(plan)
        self._start_moves([tuple(pair) for pair in pairs], c.num_layers)

    def _prepare_rows(self, plan: HomePlan | None) -> None:
        """The plan's row arrays as index tensors, once a step (each layer indexes with them)."""
        if plan is None:
            return
        index = self._tensor
        locations = set(self.creditors) | ({self.inst_id} if self.inst_id in plan.asks else set())
        self.q_idx = {i: index(plan.q_rows.get(i, _EMPTY)) for i in locations}
        self.w_idx = {i: index(plan.w_rows.get(i, _EMPTY)) for i in locations}
        self.merge_idx = {i: index(slots) for i, slots in plan.merge_slots.items()}
        self.decode_rows = index(plan.decode_rows)

    def _tensor(self, array, dtype=torch.int64):
        return torch.from_numpy(np.ascontiguousarray(array)).to(device=self.device, dtype=dtype)

    # --- KV block moves
    def _start_moves(self, pairs: list[Pair], num_layers: int) -> None:
        me = self.inst_id
        out: dict[int, list] = {}  # dst inst -> [(tier, address)] of blocks read here
        self.incoming: dict[int, list] = {}  # src inst -> [(tier, address)] of blocks written here
        for src, s_tier, s_addr, dst, d_tier, d_addr in pairs:
            if src == me:
                out.setdefault(dst, []).append((s_tier, s_addr))
            if dst == me:
                self.incoming.setdefault(src, []).append((d_tier, d_addr))
        # staged at once, before this step writes anything: a source released for the move may be reused
        staged = {dst: torch.stack([torch.stack([self.caches[t][kv][:, a] for t, a in blocks], 1)
                                    for kv in (0, 1)], 1) for dst, blocks in out.items()}  # [L, 2, n, ...]
        block = (self.block_size, self.hkv, self.d)
        self.move_bufs = {src: [torch.empty((2, len(dsts), *block), dtype=self.dtype, device=self.device)
                                for _ in range(num_layers)] for src, dsts in self.incoming.items()}
        self.move_works = [self.plane.post({dst: x[layer] for dst, x in staged.items()},
                                           {src: bufs[layer] for src, bufs in self.move_bufs.items()},
                                           tag(self.home, layer, MOVE)) for layer in range(num_layers)]

    def _land_moves(self, layer: int) -> None:
        self._wait(self.move_works[layer])
        for src, dsts in self.incoming.items():
            buf = self.move_bufs[src][layer]
            for i, (tier, address) in enumerate(dsts):
                k, v = self.caches[tier]
                k[layer, address] = buf[0, i]
                v[layer, address] = buf[1, i]

    def _wait(self, works) -> None:
        t0 = time.perf_counter()
        for work in works:
            work.wait()
        self.messaging_s += time.perf_counter() - t0

    # --- attention for this instance and its debtors
    def _prepare_compute(self, jobs: dict[int, Ask]) -> None:
        self.jobs = jobs
        self.order = sorted(jobs)
        self.row_start, total = {}, 0
        for i in self.order:
            self.row_start[i] = total
            total += jobs[i].num_rows
        self.num_rows = total
        self.write_idx = {}  # (inst, tier) -> (rows of the job's K/V, addresses, offsets)
        for i, job in jobs.items():
            for code, rows in _group_rows(job.write_tier).items():
                self.write_idx[(i, TIER_OF[code])] = (self._tensor(rows), self._tensor(job.write_address[rows]),
                                                      self._tensor(job.write_offset[rows]))
        batches: dict[int, list] = {}  # tier code -> [(rows, table, lens)]: one call each
        self.prefill = []  # (tier, first row, num_new, addresses, pos_q, pos_k, valid)
        for i in self.order:
            job, row = jobs[i], self.row_start[i]
            for code, rows in _group_rows(job.decode_tier).items():
                batches.setdefault(code, []).append((rows + row, job.decode_table[rows], job.decode_lens[rows]))
            row += len(job.decode_lens)
            for tier, indexes, addresses, n, new in job.prefill:
                pos_k = (np.asarray(indexes)[:, None] * self.block_size + np.arange(self.block_size)).reshape(-1)
                self.prefill.append((tier, row, new, self._tensor(addresses), self._tensor(np.arange(n - new, n)),
                                     self._tensor(pos_k), self._tensor(pos_k < n, torch.bool)))
                row += new
        self.decode = []
        for code, parts in batches.items():
            width = max(p[1].shape[1] for p in parts)
            table = np.zeros((sum(len(p[0]) for p in parts), width), np.int32)
            at = 0
            for _, t, _ in parts:
                table[at:at + len(t), :t.shape[1]] = t
                at += len(t)
            self.decode.append((TIER_OF[code], self._tensor(np.concatenate([p[0] for p in parts])),
                                self._tensor(table, torch.int32),
                                self._tensor(np.concatenate([p[2] for p in parts]), torch.int32)))

    def _query_size(self, ask: Ask) -> int:
        return ask.num_rows * self.hq * self.d + 2 * len(ask.write_tier) * self.hkv * self.d

    def _unpack_query(self, msg, ask: Ask):
        nq, nw = ask.num_rows, len(ask.write_tier)
        q, kv = msg.split([nq * self.hq * self.d, 2 * nw * self.hkv * self.d])
        k, v = kv.view(2, nw, self.hkv, self.d)
        return q.view(nq, self.hq, self.d), k, v

    def attend(self, layer: int, q=None, k=None, v=None):
        """q [T, Hq, D], k/v [T, Hkv, D] of this step's tokens (None when this instance only serves its debtors)
        -> attention output [T, Hq, D], or None."""
        self._land_moves(layer)
        plan = self.plan
        sends = {c: torch.cat([q[self.q_idx[c]].flatten(), k[self.w_idx[c]].flatten(), v[self.w_idx[c]].flatten()])
                 for c in self.creditors}
        recvs = {d: torch.empty(self._query_size(a), dtype=self.dtype, device=self.device)
                 for d, a in self.debtors.items()}
        self._wait(self.plane.post(sends, recvs, tag(self.home, layer, QUERY)))
        inputs = {d: self._unpack_query(msg, self.debtors[d]) for d, msg in recvs.items()}
        if plan and self.inst_id in plan.asks:
            rows, w = self.q_idx[self.inst_id], self.w_idx[self.inst_id]
            inputs[self.inst_id] = (q[rows], k[w], v[w])
        answers = self._compute(layer, inputs)
        width = self.hq * self.d + self.hq
        sends = {d: answers[self.row_start[d]:self.row_start[d] + a.num_rows] for d, a in self.debtors.items()}
        recvs = {c: torch.empty(plan.asks[c].num_rows, width, device=self.device) for c in self.creditors}
        self._wait(self.plane.post(sends, recvs, tag(self.home, layer, PARTIAL)))
        if plan is None:
            return None
        if self.inst_id in plan.asks:
            start = self.row_start[self.inst_id]
            recvs[self.inst_id] = answers[start:start + plan.asks[self.inst_id].num_rows]
        return self._merge(recvs, q)

    def _compute(self, layer: int, inputs: dict):
        """Every job's K/V stored, then its rows' (out, lse) packed as [rows, Hq * D + Hq] float32."""
        for (i, tier), (rows, addrs, offs) in self.write_idx.items():
            k_cache, v_cache = self.caches[tier]
            k_cache[layer, addrs, offs] = inputs[i][1][rows].to(k_cache.dtype)
            v_cache[layer, addrs, offs] = inputs[i][2][rows].to(v_cache.dtype)
        q_all = torch.cat([inputs[i][0] for i in self.order]) if self.order else None
        out = torch.zeros(self.num_rows, self.hq, self.d, device=self.device)
        lse = torch.full((self.num_rows, self.hq), float("-inf"), device=self.device)
        for tier, rows, block_table, seq_lens in self.decode:
            k_cache, v_cache = self.caches[tier]
            o, l = micro_attention(q_all[rows], k_cache[layer], v_cache[layer], block_table, seq_lens,
                                   check_ranges=False)
            out[rows], lse[rows] = o.float(), l
        scale = 1.0 / math.sqrt(self.d)
        for tier, row, new, addresses, pos_q, pos_k, valid in self.prefill:
            k_cache, v_cache = self.caches[tier]
            kk = k_cache[layer, addresses].flatten(0, 1)[valid]
            vv = v_cache[layer, addresses].flatten(0, 1)[valid]
            o, l = causal_partial_attention(q_all[row:row + new], kk, vv, pos_q, pos_k[valid], scale)
            out[row:row + new], lse[row:row + new] = o.float(), l
        return torch.cat([out.flatten(1), lse], 1)

    def _merge(self, answers: dict, q):
        plan, hqd = self.plan, self.hq * self.d
        unpack = {i: (a[:, :hqd].view(-1, self.hq, self.d), a[:, hqd:]) for i, a in answers.items()}
        if plan.is_prefill:
            return self._merge_prefill(unpack, q)
        decoded = self._merge_decode(unpack, q)
        if not plan.spans:
            return decoded
        out = torch.empty_like(q)
        if plan.num_seqs:
            out[self.decode_rows] = decoded
        for (start, end), part in zip(plan.spans, self._prefill_parts(unpack, q)):
            out[start:end] = part
        return out

    def _merge_decode(self, unpack, q):
        """The decoding sequences' rows (each location's first answers), merged over their partials."""
        num_seqs, num_parts = self.plan.num_seqs, self.plan.num_partials
        full_out = torch.zeros(num_parts * num_seqs, self.hq, self.d, device=self.device)
        full_lse = torch.full((num_parts * num_seqs, self.hq), float("-inf"), device=self.device)
        for inst, idx in self.merge_idx.items():
            out, lse = unpack[inst]
            full_out[idx], full_lse[idx] = out[:len(idx)], lse[:len(idx)]
        if num_parts == 1:
            return full_out.to(q.dtype)
        out, _ = scale_reduce(full_out.view(num_parts, num_seqs, self.hq, self.d),
                              full_lse.view(num_parts, num_seqs, self.hq))
        return out.to(q.dtype)

    def _merge_prefill(self, unpack, q):
        return torch.cat(list(self._prefill_parts(unpack, q)))

    def _prefill_parts(self, unpack, q):
        """Each prefilling sequence's rows, merged over the locations holding its prompt."""
        for parts, (start, end) in zip(self.plan.pieces, self.plan.spans):
            partials = [(unpack[inst][0][first:first + end - start], unpack[inst][1][first:first + end - start])
                        for inst, first in parts]
            yield merge(partials).to(q.dtype)
