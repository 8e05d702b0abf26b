"""One home's step of DistAttention across instance actors, over the data plane (dataplane.py).

The home plans its step over its requests' block tables (`plan_step`): for each location (instance) holding
rBlocks of a sequence it writes an `Ask`: the new tokens' K/V to store there and the query rows to attend with.
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

import torch

from reference_impl.backends.ray.dataplane import MOVE, PARTIAL, QUERY, tag
from reference_impl.kernels import micro_attention, scale_reduce
from reference_impl.model.kv_layer import causal_partial_attention

Pair = tuple[int, str, int, int, str, int]  # (src inst, src tier, src address, dst inst, dst tier, dst address)


@dataclass(slots=True)
class Ask:
    """What a home asks one location to do each layer; query row i belongs to decode[i] (decode) or to the
    prefill piece covering it (prefill pieces take consecutive rows)."""

    writes: list[tuple[str, int, int]] = field(default_factory=list)  # (tier, address, offset) per K/V row sent
    decode: list[tuple[str, list[int], int]] = field(default_factory=list)  # (tier, addresses, num_tokens)
    prefill: list[tuple[str, list[int], list[int], int, int]] = field(default_factory=list)
    # prefill: (tier, block indexes in the table, addresses, num_tokens after the step, num_new)

    @property
    def num_rows(self) -> int:
        return len(self.decode) + sum(p[4] for p in self.prefill)


@dataclass(slots=True)
class HomePlan:
    """The home's side: which of its token rows go to each location and how the answers merge."""

    asks: dict[int, Ask]  # location inst -> Ask (this instance included)
    q_rows: dict[int, list[int]]  # location -> this step's query rows it gets, in Ask order
    w_rows: dict[int, list[int]]  # location -> token rows whose K/V it stores
    merge_slots: dict[int, list[int]]  # decode: location -> partial slot (j * num_seqs + seq) of each answer row
    pieces: list[list[tuple[int, int]]]  # prefill: per sequence, (location, first answer row) of each part
    spans: list[tuple[int, int]]  # prefill: per sequence, its query rows in this step's tokens
    num_seqs: int
    num_partials: int
    is_prefill: bool


def plan_step(tables, num_tokens: list[int], num_new: list[int], block_size: int, is_prefill: bool) -> HomePlan:
    """tables[i]: rBlocks of sequence i in token order; num_tokens[i] its length after the step."""
    asks: dict[int, Ask] = {}
    q_rows: dict[int, list[int]] = {}
    w_rows: dict[int, list[int]] = {}
    token = 0
    for table, n, new in zip(tables, num_tokens, num_new):
        for pos in range(n - new, n):
            b = table[pos // block_size]
            asks.setdefault(b.inst_id, Ask()).writes.append((b.device, b.address, pos % block_size))
            w_rows.setdefault(b.inst_id, []).append(token)
            token += 1
    merge_slots: dict[int, list[int]] = {}
    pieces, spans = [], []
    num_partials, start = 1, 0
    for s, (table, n, new) in enumerate(zip(tables, num_tokens, num_new)):
        held: dict[tuple[int, str], list[int]] = {}
        for i, b in enumerate(table):
            held.setdefault((b.inst_id, b.device), []).append(i)
        parts = []
        for j, ((inst, tier), indexes) in enumerate(sorted(held.items())):
            ask = asks.setdefault(inst, Ask())
            addresses = [table[i].address for i in indexes]
            if is_prefill:
                parts.append((inst, len(q_rows.setdefault(inst, []))))
                q_rows[inst] += range(start, start + new)
                ask.prefill.append((tier, indexes, addresses, n, new))
            else:
                q_rows.setdefault(inst, []).append(s)
                merge_slots.setdefault(inst, []).append(j * len(tables) + s)
                ask.decode.append((tier, addresses, sum(min(block_size, n - i * block_size) for i in indexes)))
        num_partials = max(num_partials, len(held))
        pieces.append(parts)
        spans.append((start, start + new))
        start += new
    return HomePlan(asks, q_rows, w_rows, merge_slots, pieces, spans, len(tables), num_partials, is_prefill)


def merge(parts):
    if len(parts) == 1:
        return parts[0][0]
    return scale_reduce(torch.stack([o for o, _ in parts]), torch.stack([lse for _, lse in parts]))[0]


class DistStep:
    """This instance's share of home `home`'s step: on the home, its plan (None when the step only moves KV); on a
    creditor serving it, the home's Ask (`debtors` = {home: ask}); on both, the KV block pairs of the step that
    this instance reads or writes."""

    def __init__(self, inst_id: int, plane, caches: dict, plan: HomePlan | None, debtors: dict, pairs: list,
                 home: int, model_config, block_size: int, dtype, device):
        c = model_config
        self.inst_id, self.plane, self.caches, self.plan, self.home = inst_id, plane, caches, plan, home
        self.messaging_s = 0.0  # waiting on the data plane's transfers
        self.block_size, self.dtype, self.device = block_size, dtype, device
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
        """The plan's row lists as index tensors, once a step (each layer indexes with them)."""
        if plan is None:
            return
        dev = self.device
        index = lambda rows: torch.tensor(rows, dtype=torch.int64, device=dev)  # noqa: E731
        locations = set(self.creditors) | ({self.inst_id} if self.inst_id in plan.asks else set())
        self.q_idx = {i: index(plan.q_rows.get(i, [])) for i in locations}
        self.w_idx = {i: index(plan.w_rows.get(i, [])) for i in locations}
        self.merge_idx = {i: index(slots) for i, slots in plan.merge_slots.items()}

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
        dev = self.device
        self.jobs = jobs
        self.order = sorted(jobs)
        self.row_start, total = {}, 0
        for i in self.order:
            self.row_start[i] = total
            total += jobs[i].num_rows
        self.num_rows = total
        self.write_idx = {}  # (inst, tier) -> (rows of the job's K/V, addresses, offsets)
        for i, job in jobs.items():
            for r, (tier, address, offset) in enumerate(job.writes):
                rows, addrs, offs = self.write_idx.setdefault((i, tier), ([], [], []))
                rows.append(r), addrs.append(address), offs.append(offset)
        self.write_idx = {key: tuple(torch.tensor(x, device=dev) for x in w) for key, w in self.write_idx.items()}
        batches: dict[str, tuple[list, list, list]] = {}  # tier -> (rows, addresses, num_tokens): one call each
        self.prefill = []  # (tier, first row, num_new, addresses, pos_q, pos_k, valid)
        for i in self.order:
            job, row = jobs[i], self.row_start[i]
            for tier, addresses, n in job.decode:
                rows, table, lens = batches.setdefault(tier, ([], [], []))
                rows.append(row), table.append(addresses), lens.append(n)
                row += 1
            for tier, indexes, addresses, n, new in job.prefill:
                pos_k = (torch.tensor(indexes, device=dev)[:, None] * self.block_size
                         + torch.arange(self.block_size, device=dev)).reshape(-1)
                self.prefill.append((tier, row, new, torch.tensor(addresses, device=dev),
                                     torch.arange(n - new, n, device=dev), pos_k, pos_k < n))
                row += new
        self.decode = []
        for tier, (rows, table, lens) in batches.items():
            width = max(1, max(len(t) for t in table))
            block_table = torch.tensor([t + [0] * (width - len(t)) for t in table], dtype=torch.int32, device=dev)
            self.decode.append((tier, torch.tensor(rows, device=dev), block_table,
                                torch.tensor(lens, dtype=torch.int32, device=dev)))

    def _query_size(self, ask: Ask) -> int:
        return ask.num_rows * self.hq * self.d + 2 * len(ask.writes) * self.hkv * self.d

    def _unpack_query(self, msg, ask: Ask):
        nq, nw = ask.num_rows, len(ask.writes)
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
        num_seqs, num_parts = plan.num_seqs, plan.num_partials
        full_out = torch.zeros(num_parts * num_seqs, self.hq, self.d, device=self.device)
        full_lse = torch.full((num_parts * num_seqs, self.hq), float("-inf"), device=self.device)
        for inst, idx in self.merge_idx.items():
            full_out[idx], full_lse[idx] = unpack[inst]
        if num_parts == 1:
            return full_out.to(q.dtype)
        out, _ = scale_reduce(full_out.view(num_parts, num_seqs, self.hq, self.d),
                              full_lse.view(num_parts, num_seqs, self.hq))
        return out.to(q.dtype)

    def _merge_prefill(self, unpack, q):
        outs = []
        for parts, (start, end) in zip(self.plan.pieces, self.plan.spans):
            partials = [(unpack[inst][0][first:first + end - start], unpack[inst][1][first:first + end - start])
                        for inst, first in parts]
            outs.append(merge(partials).to(q.dtype))
        return torch.cat(outs)
