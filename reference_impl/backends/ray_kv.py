"""DistAttention across Ray actors. The home instance plans a step over its requests' block tables; per layer,
the new K/V that belong in a creditor's rBlocks and the query go to that creditor, which returns `(out, lse)` of
its part (`attend_part`), while the home computes its own part; `scale_reduce` merges them exactly.

Each part is one location (instance, tier) of every sequence, as in the local KV layer (kv_layer.py); only the
transport differs, so the merged output equals the local backend's.
"""
import math

import ray
import torch

from reference_impl.kernels import micro_attention, scale_reduce
from reference_impl.kv_layer import causal_partial_attention


def attend_part(caches: dict, layer: int, q, job: dict) -> list:
    """A creditor's share of one layer. caches: tier -> (k, v) [L, N, block, Hkv, D]; q [T, Hq, D];
    job: "writes" [(tier, addresses, offsets, k [n, Hkv, D], v)], "decode" [(tier, block_table, seq_lens)],
    "prefill" [(tier, q_start, q_end, pos_q, addresses, pos_k, valid)]. Returns [(out, lse)] in job order."""
    for tier, addr, off, k, v in job["writes"]:
        k_cache, v_cache = caches[tier]
        k_cache[layer, addr, off] = k.to(k_cache.dtype)
        v_cache[layer, addr, off] = v.to(v_cache.dtype)
    parts = []
    for tier, block_table, seq_lens in job["decode"]:
        k_cache, v_cache = caches[tier]
        parts.append(micro_attention(q, k_cache[layer], v_cache[layer], block_table, seq_lens, check_ranges=False))
    scale = 1.0 / math.sqrt(q.shape[-1])
    for tier, start, end, pos_q, addresses, pos_k, valid in job["prefill"]:
        k_cache, v_cache = caches[tier]
        k = k_cache[layer, addresses].flatten(0, 1)[valid]
        v = v_cache[layer, addresses].flatten(0, 1)[valid]
        parts.append(causal_partial_attention(q[start:end], k, v, pos_q, pos_k[valid], scale))
    return parts


def merge(parts):
    if len(parts) == 1:
        return parts[0][0]
    return scale_reduce(torch.stack([o for o, _ in parts]), torch.stack([lse for _, lse in parts]))[0]


class ActorStepKV:
    """One step of instance `inst_id`: `tables[i]` are the rBlocks of sequence i in token order, `num_tokens[i]`
    its length after the step, `num_new[i]` the tokens it feeds. `caches` hold this instance's tiers only;
    `peers` maps inst_id -> actor handle for the rest."""

    def __init__(self, inst_id: int, peers: dict, caches, tables, num_tokens, num_new, block_size, is_prefill, device):
        self.inst_id, self.peers, self.caches, self.is_prefill = inst_id, peers, caches, is_prefill
        as_tensor = lambda x, **kw: torch.tensor(x, device=device, **kw)  # noqa: E731
        writes, token = {}, 0
        for table, n, new in zip(tables, num_tokens, num_new):
            for pos in range(n - new, n):
                b = table[pos // block_size]
                for column, x in zip(writes.setdefault((b.inst_id, b.device), ([], [], [])),
                                     (token, b.address, pos % block_size)):
                    column.append(x)
                token += 1
        self.writes = {loc: tuple(as_tensor(x) for x in w) for loc, w in writes.items()}
        locations = sorted({(b.inst_id, b.device) for t in tables for b in t})
        self.decode = []  # (location, block_table [S, W], seq_lens [S])
        self.prefill = []  # per sequence: ((q_start, q_end), pos_q, [(location, addresses, pos_k, valid)])
        start = 0
        for loc in locations if not is_prefill else []:
            rows = [[i for i, b in enumerate(t) if (b.inst_id, b.device) == loc] for t in tables]
            lens = [sum(min(block_size, n - i * block_size) for i in row) for row, n in zip(rows, num_tokens)]
            width = max(1, max(len(r) for r in rows))
            table_rows = [[t[i].address for i in r] + [0] * (width - len(r)) for t, r in zip(tables, rows)]
            self.decode.append((loc, as_tensor(table_rows, dtype=torch.int32), as_tensor(lens, dtype=torch.int32)))
        for table, n, new in zip(tables, num_tokens, num_new) if is_prefill else []:
            parts = []
            for loc in sorted({(b.inst_id, b.device) for b in table}):
                mine = [i for i, b in enumerate(table) if (b.inst_id, b.device) == loc]
                pos_k = (as_tensor(mine)[:, None] * block_size + torch.arange(block_size, device=device)).reshape(-1)
                parts.append((loc, as_tensor([table[i].address for i in mine]), pos_k, pos_k < n))
            self.prefill.append(((start, start + new), torch.arange(n - new, n, device=device), parts))
            start += new

    def attend(self, layer: int, q, k, v):
        """q [T, Hq, D], k/v [T, Hkv, D] of this step's tokens -> attention output [T, Hq, D]."""
        jobs: dict[int, dict] = {}

        def job(inst):
            return jobs.setdefault(inst, {"writes": [], "decode": [], "prefill": []})

        for (inst, tier), (idx, addr, off) in self.writes.items():
            if inst == self.inst_id:
                k_cache, v_cache = self.caches[(inst, tier)]
                k_cache[layer, addr, off] = k[idx].to(k_cache.dtype)
                v_cache[layer, addr, off] = v[idx].to(v_cache.dtype)
            else:
                job(inst)["writes"].append((tier, addr, off, k[idx], v[idx]))
        for (inst, tier), block_table, seq_lens in self.decode:
            if inst != self.inst_id:
                job(inst)["decode"].append((tier, block_table, seq_lens))
        for (start, end), pos_q, parts in self.prefill:
            for (inst, tier), addresses, pos_k, valid in parts:
                if inst != self.inst_id:
                    job(inst)["prefill"].append((tier, start, end, pos_q, addresses, pos_k, valid))
        futures = {inst: self.peers[inst].attend_part.remote(layer, q, j) for inst, j in jobs.items()}
        mine = {tier: kv for (inst, tier), kv in self.caches.items() if inst == self.inst_id}
        local = attend_part(mine, layer, q, {
            "writes": [],
            "decode": [(tier, bt, sl) for (inst, tier), bt, sl in self.decode if inst == self.inst_id],
            "prefill": [(tier, s, e, pq, a, pk, va) for (s, e), pq, parts in self.prefill
                        for (inst, tier), a, pk, va in parts if inst == self.inst_id]})
        answers = {inst: iter(a) for inst, a in zip(futures, ray.get(list(futures.values())))}
        answers[self.inst_id] = iter(local)
        if not self.is_prefill:  # each actor answered its locations in the order of self.decode
            return merge([next(answers[inst]) for (inst, _), _, _ in self.decode])
        outs = [merge([next(answers[inst]) for (inst, _), *_ in parts]).to(q.dtype) for _, _, parts in self.prefill]
        return torch.cat(outs)
