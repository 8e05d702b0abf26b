"""The KV layer of one engine step: writes new K/V into rBlocks and runs attention where the blocks live.

Caches are per (instance, tier): k/v [num_layers, num_blocks, block_size, num_kv_heads, head_dim]. A step is
planned once (`StepKV`), then `attend` is called per layer. Decode: a `micro_attention` partial over each
location's rBlocks of every sequence (the creditor's share of DistAttention), merged with `scale_reduce`.
Locations whose caches are slices of one tensor (instances sharing a device, `storage`) have their partials
computed in one `micro_attention` call, one row per (location, sequence) piece; each row is its own partial.
Prefill: causal attention of the prompt over each location's part of its KV, merged the same way.
"""
import math

import torch

from reference_impl.kernels import micro_attention, scale_reduce
from reference_impl.control.rblock import RBlock

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


def row_width(num_blocks: list[int]) -> int:
    """Blocks per row minimising the padded blocks gathered plus half a block per row."""
    def cost(w):
        rows = sum(-(-n // w) for n in num_blocks)
        return rows * w + 0.5 * rows
    return min(range(1, max(num_blocks) + 1), key=lambda w: (cost(w), -w))


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
        if is_prefill:
            self.prefill_parts = [self._prefill_parts(t, n) for t, n in zip(tables, num_tokens)]
            self.query_spans = []
            start = 0
            for new in num_new:
                self.query_spans.append((start, start + new))
                start += new
            self.positions = [torch.arange(n - new, n, device=device) for n, new in zip(num_tokens, num_new)]
        else:
            self.decode_parts = self._plan_decode(tables, num_tokens)

    def _plan_decode(self, tables, num_tokens):
        """Rows of partials per storage key. A (location, sequence) pair's rBlocks are cut into rows of
        `row_width` blocks, so that a few long pairs do not pad every row; a row of sequence s lands in
        slot j * num_seqs + s (j: its ordinal among s's partials), and the slots merge with scale_reduce."""
        num_seqs = len(tables)
        held = {}  # location -> {seq: ([physical addresses], [tokens per block])}
        for s, (table, n) in enumerate(zip(tables, num_tokens)):
            for i, b in enumerate(table):
                addresses, tokens = held.setdefault((b.inst_id, b.device), {}).setdefault(s, ([], []))
                addresses.append(b.address)
                tokens.append(max(0, min(self.block_size, n - i * self.block_size)))
        groups = {}  # storage key -> locations computed in one call
        for loc in sorted(held):
            groups.setdefault(self.storage[loc][0] if self.storage else loc, []).append(loc)
        next_j = [0] * num_seqs
        parts = []
        for key, locs in groups.items():
            pairs = [(loc, s, a, t) for loc in locs for s, (a, t) in held[loc].items()]
            width = row_width([len(a) for _, _, a, _ in pairs])
            rows, lens, slots = [], [], []
            for loc, s, addresses, tokens in pairs:
                offset = self.storage[loc][1] if self.storage else 0
                for c in range(0, len(addresses), width):
                    rows.append([a + offset for a in addresses[c:c + width]])
                    lens.append(sum(tokens[c:c + width]))
                    slots.append(next_j[s] * num_seqs + s)
                    next_j[s] += 1
            width = max(len(r) for r in rows)
            block_table = torch.tensor([r + [0] * (width - len(r)) for r in rows], dtype=torch.int32,
                                       device=self.device)
            parts.append((key, block_table, torch.tensor(lens, dtype=torch.int32, device=self.device),
                          torch.tensor(slots, device=self.device)))
        self.num_partials = max(next_j)
        return parts

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
        num_seqs, num_parts = q.shape[0], self.num_partials
        # slots without a partial stay empty: out 0, lse -inf
        full_out = q.new_zeros(num_parts * num_seqs, *q.shape[1:])
        full_lse = torch.full((num_parts * num_seqs, q.shape[1]), float("-inf"), device=q.device)
        for key, block_table, seq_lens, slots in self.decode_parts:
            k_cache, v_cache = self.shared[key] if self.storage else self.caches[key]
            out, lse = micro_attention(q[slots % num_seqs], k_cache[layer], v_cache[layer], block_table, seq_lens,
                                       check_ranges=False)
            full_out[slots], full_lse[slots] = out, lse
        if num_parts == 1:
            return full_out
        out, _ = scale_reduce(full_out.view(num_parts, *q.shape), full_lse.view(num_parts, *q.shape[:2]))
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
