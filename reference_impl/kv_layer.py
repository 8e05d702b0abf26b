"""The KV layer of one engine step: writes new K/V into rBlocks and runs attention where the blocks live.

Caches are per (instance, tier): k/v [num_layers, num_blocks, block_size, num_kv_heads, head_dim]. A step is
planned once (`StepKV`), then `attend` is called per layer. Decode: a `micro_attention` partial over each
location's rBlocks of every sequence (the creditor's share of DistAttention), merged with `scale_reduce`.
Locations whose caches are slices of one tensor (instances sharing a device, `storage`) have their partials
computed in one `micro_attention` call, one row per (location, sequence); each row is still its own partial.
Prefill: causal attention of the prompt over each location's part of its KV, merged the same way.
"""
import math

import torch

from reference_impl.kernels import micro_attention, scale_reduce
from reference_impl.rblock import RBlock

Location = tuple[int, str]  # (inst_id, tier)


def causal_partial_attention(q, k, v, pos_q, pos_k, scale):
    """q [Tq, Hq, D], k/v [Tk, Hkv, D]; keys after a query's position are masked.
    Returns out [Tq, Hq, D] (normalised over this part) and lse [Tq, Hq] (-inf where no key is visible)."""
    tq, hq, d = q.shape
    hkv = k.shape[1]
    qg = q.float().view(tq, hkv, hq // hkv, d).permute(1, 2, 0, 3)  # [Hkv, G, Tq, D]
    scores = (qg @ k.float().permute(1, 2, 0)[:, None]) * scale  # [Hkv, G, Tq, Tk]
    scores = scores.masked_fill((pos_k[None, :] > pos_q[:, None])[None, None], float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)  # [Hkv, G, Tq]
    probs = torch.exp(scores - torch.where(torch.isfinite(lse), lse, torch.zeros_like(lse))[..., None])
    out = probs @ v.float().permute(1, 0, 2)[:, None]  # [Hkv, G, Tq, D]
    return out.permute(2, 0, 1, 3).reshape(tq, hq, d), lse.permute(2, 0, 1).reshape(tq, hq)


def merge(parts):
    if len(parts) == 1:
        return parts[0][0]
    out, _ = scale_reduce(torch.stack([o for o, _ in parts]), torch.stack([lse for _, lse in parts]))
    return out


class StepKV:
    """Plan of one step: `tables[i]` are the rBlocks of `seqs[i]` in token order, `num_tokens[i]` its length
    after this step, `num_new[i]` the tokens it feeds this step (all of them for a prefill, 1 for decode)."""

    def __init__(self, caches: dict[Location, tuple], tables: list[list[RBlock]], num_tokens: list[int],
                 num_new: list[int], block_size: int, is_prefill: bool, device, storage: dict | None = None, shared: dict | None = None):
        """`storage`: location -> (key, block offset) into `shared[key]` caches, for locations on one device."""
        self.caches = caches
        self.storage = storage
        self.shared = shared
        self.is_prefill = is_prefill
        self.block_size = block_size
        self.device = device
        self.writes = {}  # location -> (token indices, block addresses, offsets)
        token = 0
        for table, n, new in zip(tables, num_tokens, num_new):
            for pos in range(n - new, n):
                b = table[pos // block_size]
                idx, addr, off = self.writes.setdefault((b.inst_id, b.device), ([], [], []))
                idx.append(token)
                addr.append(b.address)
                off.append(pos % block_size)
                token += 1
        self.writes = {loc: tuple(torch.tensor(x, device=device) for x in w) for loc, w in self.writes.items()}
        self.locations = sorted({(b.inst_id, b.device) for t in tables for b in t})
        if is_prefill:
            self.prefill_parts = [self._prefill_parts(t, n) for t, n in zip(tables, num_tokens)]
            self.query_spans = []
            start = 0
            for new in num_new:
                self.query_spans.append((start, start + new))
                start += new
            self.positions = [torch.arange(n - new, n, device=device) for n, new in zip(num_tokens, num_new)]
        else:
            groups = {}  # storage key -> locations computed in one call
            for loc in self.locations:
                key, _ = storage[loc] if storage else (loc, 0)
                groups.setdefault(key, []).append(loc)
            self.decode_parts = [self._decode_part(key, locs, tables, num_tokens) for key, locs in groups.items()]

    def _decode_part(self, key, locs, tables, num_tokens):
        """One row per (location, sequence) pair holding tokens; `slots` = p * num_seqs + s of each row."""
        rows, lens, slots = [], [], []
        for p, loc in enumerate(locs):
            offset = self.storage[loc][1] if self.storage else 0
            for s, (table, n) in enumerate(zip(tables, num_tokens)):
                mine = [i for i, b in enumerate(table) if (b.inst_id, b.device) == loc]
                if mine:
                    rows.append([table[i].address + offset for i in mine])
                    lens.append(sum(min(self.block_size, n - i * self.block_size) for i in mine))
                    slots.append(p * len(tables) + s)
        width = max(len(r) for r in rows)
        block_table = torch.tensor([r + [0] * (width - len(r)) for r in rows], dtype=torch.int32, device=self.device)
        return (key, len(locs), block_table, torch.tensor(lens, dtype=torch.int32, device=self.device),
                torch.tensor(slots, device=self.device))

    def _prefill_parts(self, table, n):
        parts = []
        for loc in sorted({(b.inst_id, b.device) for b in table}):
            mine = [i for i, b in enumerate(table) if (b.inst_id, b.device) == loc]
            addresses = torch.tensor([table[i].address for i in mine], device=self.device)
            positions = (torch.tensor(mine, device=self.device)[:, None] * self.block_size
                         + torch.arange(self.block_size, device=self.device)[None, :]).reshape(-1)
            parts.append((loc, addresses, positions, positions < n))
        return parts

    def attend(self, layer: int, q, k, v):
        """q [T, Hq, D], k/v [T, Hkv, D] of this step's tokens -> attention output [T, Hq, D]."""
        for loc, (idx, addr, off) in self.writes.items():
            k_cache, v_cache = self.caches[loc]
            k_cache[layer, addr, off] = k[idx].to(k_cache.dtype)
            v_cache[layer, addr, off] = v[idx].to(v_cache.dtype)
        if self.is_prefill:
            return self._prefill(layer, q)
        num_seqs = q.shape[0]
        outs, lses = [], []
        for key, num_parts, block_table, seq_lens, slots in self.decode_parts:
            k_cache, v_cache = self.shared[key] if self.storage else self.caches[key]
            out, lse = micro_attention(q[slots % num_seqs], k_cache[layer], v_cache[layer], block_table, seq_lens,
                                       check_ranges=False)
            if num_parts == 1 and len(self.decode_parts) == 1 and out.shape[0] == num_seqs:
                return out
            # pairs without tokens stay empty partials: out 0, lse -inf
            full_out = out.new_zeros(num_parts * num_seqs, *q.shape[1:])
            full_lse = lse.new_full((num_parts * num_seqs, q.shape[1]), float("-inf"))
            full_out[slots], full_lse[slots] = out, lse
            outs.append(full_out.view(num_parts, *q.shape))
            lses.append(full_lse.view(num_parts, *q.shape[:2]))
        out, _ = scale_reduce(torch.cat(outs), torch.cat(lses))
        return out

    def _prefill(self, layer, q):
        scale = 1.0 / math.sqrt(q.shape[-1])
        outs = []
        for (start, end), pos_q, parts in zip(self.query_spans, self.positions, self.prefill_parts):
            partials = []
            for loc, addresses, pos_k, valid in parts:
                k_cache, v_cache = self.caches[loc]
                k = k_cache[layer, addresses].flatten(0, 1)[valid]
                v = v_cache[layer, addresses].flatten(0, 1)[valid]
                out, lse = causal_partial_attention(q[start:end], k, v, pos_q, pos_k[valid], scale)
                partials.append((out, lse))
            outs.append(merge(partials).to(q.dtype))
        return torch.cat(outs)
