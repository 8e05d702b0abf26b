"""The KV layer of one engine step: writes new K/V into rBlocks in place and runs attention where the blocks live.

Caches are per (instance, tier): k/v [num_layers, num_blocks, block_size, num_kv_heads, head_dim]. A step is
planned once (`StepKV`, vectorised over the step's blocks: step_inputs.py), then `attend` is called per layer.
K/V: one `store_kv` per storage a layer. Decode: a `micro_attention` partial over each location's rBlocks of every
sequence (the creditor's share of DistAttention), merged with `scale_reduce`. Locations whose caches are slices of
one tensor (instances sharing a device, `storage`) have their partials computed in one `micro_attention` call, one
row per (location, sequence) piece; each row is its own partial. Prefill: a prompt whose KV is at one location
attends over its own K/V with torch SDPA (flash or memory-efficient on CUDA; on CUDA a step whose prompts are each at
one location runs them all in one varlen FlashAttention call: prompt_attention.py); a prompt spread over locations
attends over each location's part (`causal_partial_attention`) and the parts merge the same way. A chunked step
(mixed) decodes some sequences and prefills a prompt chunk of others: the decodes as above, a chunk over its
prompt's K/V so far, read from its rBlocks (SDPA with the causal mask aligned to the chunk's end where they are at
one location, partials merged with `scale_reduce` where they span locations).
"""
import copy
import math

import numpy as np
import torch
import torch.nn.functional as F
from torch.nn.attention.bias import causal_lower_right

from reference_impl.kernels import micro_attention, scale_reduce, store_kv
from reference_impl.model.prompt_attention import causal_attention, packed_causal_attention, varlen_fits
from reference_impl.model.step_inputs import Locations, block_arrays, stage

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


def chunk_attention(q, k, v):
    """The last Tq of Tk tokens (a prompt chunk after its earlier chunks): q [Tq, Hq, D], k/v [Tk, Hkv, D] ->
    [Tq, Hq, D] by torch SDPA with the causal mask aligned to the end."""
    out = F.scaled_dot_product_attention(q.transpose(0, 1)[None], k.transpose(0, 1)[None], v.transpose(0, 1)[None],
                                         attn_mask=causal_lower_right(q.shape[0], k.shape[0]),
                                         enable_gqa=q.shape[1] != k.shape[1])
    return out[0].transpose(0, 1)


def row_width(num_blocks) -> int:
    """Blocks per row minimising the padded blocks gathered plus half a block per row (ties: the widest)."""
    counts = np.asarray(num_blocks, np.int64)
    widths = np.arange(1, int(counts.max()) + 1)
    rows = (-(-counts[None, :] // widths[:, None])).sum(1)
    cost = rows * (widths + 0.5)
    return int(widths[np.flatnonzero(cost == cost.min())[-1]])


def merge(parts):
    if len(parts) == 1:
        return parts[0][0]
    out, _ = scale_reduce(torch.stack([o for o, _ in parts]), torch.stack([lse for _, lse in parts]))
    return out



def decode_rows(b, num_tokens, block_size: int, num_keys: int, num_locs: int):
    """Rows of decode partials per storage key of blocks `b` (step_inputs.BlockArrays) whose sequences end at
    `num_tokens`: a (location, sequence) pair's rBlocks are cut into rows of `row_width` blocks, so that a few long
    pairs do not pad every row; a row of sequence s lands in slot j * num_seqs + s (j: its ordinal among s's
    partials), and the slots merge with scale_reduce. Returns [(key, block table, row lengths, query rows, partial
    slots, rows of last tokens)], the number of partials a sequence may have, and whether it is one row a sequence
    in order in one storage (`direct`)."""
    bs, num_seqs = block_size, len(num_tokens)
    group = b.key * num_locs + b.loc  # blocks are in (seq, index) order already
    order = np.arange(len(group)) if (group[1:] >= group[:-1]).all() else np.argsort(group, kind="stable")
    key, loc, seq, index, address = b.key[order], b.loc[order], b.seq[order], b.index[order], b.address[order]
    tokens = np.clip(num_tokens[seq] - index * bs, 0, bs)
    new_pair = np.ones(len(order), bool)
    new_pair[1:] = (key[1:] != key[:-1]) | (loc[1:] != loc[:-1]) | (seq[1:] != seq[:-1])
    pair = np.cumsum(new_pair) - 1
    pair_start = np.flatnonzero(new_pair)
    in_pair = np.arange(len(order)) - pair_start[pair]
    pair_len = np.diff(np.append(pair_start, len(order)))
    pair_key = key[pair_start]
    keys_here = np.flatnonzero(np.bincount(pair_key, minlength=num_keys)).tolist()
    width_of_key = {k: row_width(pair_len if len(keys_here) == 1 else pair_len[pair_key == k]) for k in keys_here}
    key_width = np.ones(int(key.max()) + 1, np.int64)
    for k, w in width_of_key.items():
        key_width[k] = w
    width = key_width[key]
    col = in_pair % width
    row = np.cumsum(col == 0) - 1
    row_first = np.flatnonzero(col == 0)
    row_seq, row_key = seq[row_first], key[row_first]
    row_len = np.bincount(row, weights=tokens, minlength=len(row_first)).astype(np.int64)
    by_seq = np.argsort(row_seq, kind="stable")
    seq_first = np.searchsorted(row_seq[by_seq], np.arange(num_seqs))
    ordinal = np.empty(len(row_first), np.int64)
    ordinal[by_seq] = np.arange(len(row_first)) - seq_first[row_seq[by_seq]]
    slots = ordinal * num_seqs + row_seq
    num_partials = int(ordinal.max()) + 1 if len(ordinal) else 1
    direct = num_partials == 1 and len(width_of_key) == 1 and np.array_equal(row_seq, np.arange(num_seqs))
    # the row holding each sequence's last token: the one a next step without a new block lengthens
    position = np.empty(len(order), np.int64)
    position[order] = np.arange(len(order))
    last_row = row[position[b.start + (num_tokens - 1) // bs]]
    part_plan = []  # (key, block table, row lengths, query rows, partial slots, rows of last tokens)
    for k in width_of_key:
        mine = np.flatnonzero(row_key == k)
        in_key = row[key == k] - mine[0]
        table = np.zeros((len(mine), int(col[key == k].max()) + 1), np.int32)
        table[in_key, col[key == k]] = address[key == k]
        last = last_row[row_key[last_row] == k] - mine[0]
        part_plan.append((k, table, row_len[mine].astype(np.int32), row_seq[mine], slots[mine], last))
    return part_plan, num_partials, direct


def _row_arrays(rows):
    table, lens, q_rows, slots, last = rows
    return (np.array(table, np.int32), np.array(lens, np.int32), np.array(q_rows, np.int64), np.array(slots, np.int64),
            np.array(last, np.int64))


def _joined_rows(parts):
    """One storage's rows from several sets [(table, lengths, query rows, slots, rows of last tokens)], ordered by
    sequence (so that one row a sequence reads directly); tables padded to the widest."""
    width = max(p[0].shape[1] for p in parts)
    offsets = np.cumsum([0] + [len(p[2]) for p in parts]).tolist()
    table = np.zeros((offsets[-1], width), np.int32)
    for p, o in zip(parts, offsets):
        table[o:o + len(p[2]), :p[0].shape[1]] = p[0]
    lens, q_rows, slots = (np.concatenate([p[i] for p in parts]) for i in (1, 2, 3))
    last = np.concatenate([p[4] + o for p, o in zip(parts, offsets)])
    order = np.argsort(q_rows, kind="stable")
    where = np.empty(len(order), np.int64)
    where[order] = np.arange(len(order))
    return table[order], lens[order], q_rows[order], slots[order], where[last]


def subset_blocks(b, seqs: np.ndarray, num_seqs: int):
    """BlockArrays `b` of sequences `seqs` only (indices, ascending), renumbered 0..len(seqs) - 1."""
    keep = np.zeros(num_seqs, bool)
    keep[seqs] = True
    renumber = np.cumsum(keep) - 1
    mask = keep[b.seq]
    counts = np.diff(np.append(b.start, len(b.seq)))[seqs]
    return type(b)(renumber[b.seq[mask]], b.index[mask], b.loc[mask], b.key[mask], b.address[mask],
                   np.cumsum(counts) - counts)


class StepKV:
    """Plan of one step: `tables[i]` are the rBlocks of `seqs[i]` in token order, `num_tokens[i]` its length
    after this step, `num_new[i]` the tokens it feeds this step (all of them for a prefill, 1 for decode; a decode
    step where some feed more is a chunked step: those prefill a prompt chunk)."""

    def __init__(self, caches: dict[Location, tuple], tables, num_tokens, num_new, block_size: int,
                 is_prefill: bool, device, storage: dict | None = None, shared: dict | None = None, *,
                 locations: Locations | None = None, blocks=None, packed: bool = True):
        """`storage`: location -> (key, block offset) into `shared[key]` caches, for locations on one device.
        `locations` and `blocks` (step_inputs.py) may be given instead, built by the caller. `packed`: on CUDA, a
        prefill of several prompts each at one location attends in one varlen call (prompt_attention.py)."""
        self.locations = locations or Locations(caches, storage, shared)
        self.block_size, self.is_prefill, self.device = block_size, is_prefill, torch.device(device)
        self.blocks = blocks if blocks is not None else block_arrays(tables, self.locations)
        self.num_tokens = np.asarray(num_tokens, np.int64)
        self.num_new = np.asarray(num_new, np.int64)
        self.num_seqs = len(self.num_tokens)
        self.writes = self.decode_parts = None  # tensors, staged at the first `attend` (a graph replay needs none)
        self._lent_parts = None  # an earlier step's decode tensors whose tables and rows this plan shares
        self._all_blocks = None  # a replanned step's blocks, built when asked (`replan`)
        self.decode_q = None  # a chunked step: the token rows of its decoding sequences (a tensor)
        self.prefill = []
        self.packed = None  # (cu_seqlens int32 on the device, longest prompt) of a packed prefill
        self._plan_writes()
        if is_prefill:
            self._plan_prefill(range(self.num_seqs))
            if packed and self.device.type == "cuda" and self.num_seqs > 1 and all(
                    how[0] == "own" for _, how in self.prefill):
                cu = np.concatenate(([0], np.cumsum(self.num_new))).astype(np.int32)
                self.packed = (self._tensor(cu), int(self.num_new.max()))
        elif self.num_new.shape[0] and int(self.num_new.max()) > 1:
            self._plan_mixed()
        else:
            self._plan_decode()

    @property
    def is_mixed(self) -> bool:
        return self.decode_q is not None

    def _tensor(self, array):
        return stage(array, self.device)

    def _plan_writes(self):
        """Per storage key: (rows of this step's tokens or None for all, flat slots) of the K/V to store."""
        b, bs, new = self.blocks, self.block_size, self.num_new
        ends = np.cumsum(new)
        seq = np.repeat(np.arange(self.num_seqs), new)
        pos = np.arange(int(ends[-1]) if len(ends) else 0) + np.repeat(self.num_tokens - ends, new)
        block = b.start[seq] + pos // bs
        keys, slots = b.key[block], b.address[block] * bs + pos % bs
        self.write_plan = []  # (key, rows or None for all, slots) as arrays
        present = np.flatnonzero(np.bincount(keys, minlength=len(self.locations.keys)))
        for key in present.tolist():
            if len(present) == 1:
                self.write_plan.append((key, None, slots))
                continue
            rows = np.flatnonzero(keys == key)
            self.write_plan.append((key, rows, slots[rows]))

    def _stage_writes(self):
        self.writes = [(key, None if rows is None else self._tensor(rows), self._tensor(slots))
                       for key, rows, slots in self.write_plan]

    def _plan_decode(self):
        self.part_plan, self.num_partials, self.direct = decode_rows(
            self.blocks, self.num_tokens, self.block_size, len(self.locations.keys), len(self.locations.locs))

    def _plan_mixed(self):
        """A chunked step: decode rows for the sequences feeding one token, prefill pieces for the chunks."""
        decodes = np.flatnonzero(self.num_new == 1)
        self.decode_q = self._tensor(np.cumsum(self.num_new)[decodes] - 1)
        self.part_plan, self.num_partials, self.direct = [], 1, False
        if len(decodes):
            self.part_plan, self.num_partials, self.direct = decode_rows(
                subset_blocks(self.blocks, decodes, self.num_seqs), self.num_tokens[decodes], self.block_size,
                len(self.locations.keys), len(self.locations.locs))
        self._plan_prefill(np.flatnonzero(self.num_new > 1).tolist())

    def _stage_decode(self):
        """The decode plan's tensors; an earlier step's parts (`_lent_parts`) lend their unchanged tables and rows."""
        parts = []
        for i, (k, table, lens, q_rows, slots, _) in enumerate(self.part_plan):
            if self._lent_parts:
                _, table_t, _, q_rows_t, slots_t = self._lent_parts[i]
            else:
                table_t, q_rows_t, slots_t = self._tensor(table), self._tensor(q_rows), self._tensor(slots)
            parts.append((k, table_t, self._tensor(lens), q_rows_t, slots_t))
        self.decode_parts = parts

    def advance(self, num_tokens) -> "StepKV | None":
        """The plan of the next decode step of the same sequences over the same tables, each sequence one token
        longer and no token starting a block (only the slots and the row lengths move); None when that is not so."""
        num_tokens = np.asarray(num_tokens, np.int64)
        if (self.is_prefill or self.is_mixed or num_tokens.shape != self.num_tokens.shape
                or not np.array_equal(num_tokens, self.num_tokens + 1) or not ((num_tokens - 1) % self.block_size).all()):
            return None
        step = copy.copy(self)
        step.num_tokens = num_tokens
        step.write_plan = [(key, rows, slots + 1) for key, rows, slots in self.write_plan]
        step.writes = step.decode_parts = None
        step._lent_parts = self.decode_parts or self._lent_parts
        step.part_plan = []
        for key, table, lens, q_rows, slots, last in self.part_plan:
            lens = lens.copy()
            lens[last] += 1
            step.part_plan.append((key, table, lens, q_rows, slots, last))
        return step

    def replan(self, changed, num_tokens, changed_tables, all_blocks) -> "StepKV | None":
        """The plan of the next decode step of the same sequences, each one token longer, where only the tables of
        sequences `changed` (indices) differ from this plan's (a block moved or added): their rows are planned
        afresh, in Python over their few blocks (`changed_tables`, their rBlocks), cut at this plan's row width per
        storage, and the others' rows kept, one token longer. `all_blocks()`: every sequence's blocks
        (step_inputs.block_arrays), called only where needed. None when a kept sequence's token starts a block."""
        num_tokens = np.asarray(num_tokens, np.int64)
        kept = np.ones(self.num_seqs, bool)
        kept[changed] = False
        if (self.is_prefill or self.is_mixed or num_tokens.shape != self.num_tokens.shape
                or not np.array_equal(num_tokens, self.num_tokens + 1) or not ((num_tokens[kept] - 1) % self.block_size).all()):
            return None
        bs, num_seqs, code = self.block_size, self.num_seqs, self.locations.code
        key_of, offset = self.locations.key_of.tolist(), self.locations.offset.tolist()
        width = {k: table.shape[1] for k, table, *_ in self.part_plan}
        rows = {}  # key -> (block rows, lengths, query rows, slots, rows of last tokens)
        tails = []  # (key, slot) of each changed sequence's new token
        for s, table in zip(changed, changed_tables):
            n = int(num_tokens[s])
            pairs = {}
            for i, block in enumerate(table):
                loc = code[(block.inst_id, block.device)]
                pairs.setdefault((key_of[loc], loc), []).append((i, block.address + offset[loc]))
                if i == (n - 1) // bs:
                    tails.append((key_of[loc], (block.address + offset[loc]) * bs + (n - 1) % bs))
            ordinal = 0
            for key, loc in sorted(pairs):
                items = pairs[key, loc]
                w = width.setdefault(key, len(items))
                mine = rows.setdefault(key, ([], [], [], [], []))
                for c in range(0, len(items), w):
                    chunk = items[c:c + w]
                    if any(i == (n - 1) // bs for i, _ in chunk):
                        mine[4].append(len(mine[1]))
                    mine[0].append([a for _, a in chunk] + [0] * (w - len(chunk)))
                    mine[1].append(sum(min(max(n - i * bs, 0), bs) for i, _ in chunk))
                    mine[2].append(s)
                    mine[3].append(ordinal * num_seqs + s)
                    ordinal += 1
        step = copy.copy(self)
        step.num_tokens = num_tokens
        step.blocks, step._all_blocks = None, all_blocks
        step.writes = step.decode_parts = step._lent_parts = None
        if (len(self.write_plan) == 1 and self.write_plan[0][1] is None
                and all(key == self.write_plan[0][0] for key, _ in tails)):
            slots = self.write_plan[0][2] + 1
            slots[changed] = [slot for _, slot in tails]
            step.write_plan = [(self.write_plan[0][0], None, slots)]
        else:
            step.blocks = all_blocks()
            step._plan_writes()
        step.part_plan = []
        for k, table, lens, q_rows, slots, last in self.part_plan:
            lens = lens.copy()
            lens[last] += 1
            mine = kept[q_rows]
            renumber = np.cumsum(mine) - 1
            parts = [(table[mine], lens[mine], q_rows[mine], slots[mine], renumber[last[mine[last]]])]
            if k in rows:
                parts.append(_row_arrays(rows.pop(k)))
            step.part_plan.append((k, *_joined_rows(parts)))
        step.part_plan += [(k, *_joined_rows([_row_arrays(r)])) for k, r in rows.items()]
        step.part_plan = [part for part in step.part_plan if len(part[3])]
        slots = np.concatenate([part[4] for part in step.part_plan])
        step.num_partials = int(slots.max()) // num_seqs + 1 if len(slots) else 1
        step.direct = (step.num_partials == 1 and len(step.part_plan) == 1
                       and np.array_equal(step.part_plan[0][3], np.arange(num_seqs)))
        return step

    def _plan_prefill(self, seqs):
        """Per sequence of `seqs`: its query rows, and how it attends: ("own",) (a whole prompt at one location:
        SDPA over the step's own K/V), ("paged", key, addresses, num_tokens) (a chunk whose prompt is at one
        location: its K/V so far read from its rBlocks), or ("parts", positions of its queries, [(key, addresses,
        positions of their tokens, which are valid)] per location)."""
        b, bs = self.blocks, self.block_size
        ends = np.cumsum(self.num_new)
        for s in seqs:
            end, n, new = int(ends[s]), int(self.num_tokens[s]), int(self.num_new[s])
            lo, hi = b.start[s], b.start[s] + -(-n // bs)
            locs = b.loc[lo:hi]
            span = (end - new, end)
            if (locs == locs[0]).all():
                if new == n:
                    self.prefill.append((span, ("own",)))
                else:
                    self.prefill.append((span, ("paged", int(b.key[lo]), self._tensor(b.address[lo:hi]), n)))
                continue
            parts = []
            for loc in np.unique(locs):
                mine = np.flatnonzero(locs == loc)
                pos_k = (mine[:, None] * bs + np.arange(bs)[None, :]).reshape(-1)
                valid = pos_k < n
                parts.append((int(b.key[lo + mine[0]]), self._tensor(b.address[lo + mine]),
                              self._tensor(pos_k[valid]), self._tensor(valid)))
            self.prefill.append((span, ("parts", self._tensor(np.arange(n - new, n)), parts)))

    def whole_rows(self):
        """A decode step's KV as one row per sequence in one storage: (storage key, block table [S, width],
        lengths [S], slots of the new tokens [S]) as arrays, or None when the KV spans storages."""
        if self.blocks is None:
            self.blocks = self._all_blocks()
        b = self.blocks
        if self.is_prefill or self.is_mixed or not len(b.key) or not (b.key == b.key[0]).all():
            return None
        counts = np.diff(np.append(b.start, len(b.key)))
        table = np.zeros((self.num_seqs, int(counts.max())), np.int32)
        table[b.seq, b.index] = b.address
        return int(b.key[0]), table, self.num_tokens.astype(np.int32), self.write_plan[0][2]

    def attend(self, layer: int, q, k, v):
        """q [T, Hq, D], k/v [T, Hkv, D] of this step's tokens -> attention output [T, Hq, D]."""
        if self.writes is None:
            self._stage_writes()
            if not self.is_prefill:
                self._stage_decode()
        key_caches = self.locations.key_caches
        for key, rows, slots in self.writes:
            k_cache, v_cache = key_caches[key]
            store_kv(k if rows is None else k[rows], v if rows is None else v[rows], k_cache[layer], v_cache[layer],
                     slots, has_padding=False)
        if self.is_prefill:
            if self.packed is not None and varlen_fits(q):
                return packed_causal_attention(q, k, v, *self.packed)
            outs = [out for _, out in self._prefill(layer, q, k, v)]
            return outs[0] if len(outs) == 1 else torch.cat(outs)
        if self.decode_q is None:
            return self._decode(layer, q)
        out = torch.empty_like(q)
        if self.decode_parts:
            out[self.decode_q] = self._decode(layer, q[self.decode_q])
        for (start, end), chunk_out in self._prefill(layer, q, k, v):
            out[start:end] = chunk_out
        return out

    def _decode(self, layer: int, q):
        """q [S, Hq, D] (one token a decoding sequence) -> attention output [S, Hq, D]."""
        key_caches = self.locations.key_caches
        num_seqs, num_parts = q.shape[0], self.num_partials
        if self.direct:
            key, block_table, seq_lens, _, _ = self.decode_parts[0]
            k_cache, v_cache = key_caches[key]
            return micro_attention(q, k_cache[layer], v_cache[layer], block_table, seq_lens, check_ranges=False)[0]
        # slots without a partial stay empty: out 0, lse -inf
        full_out = q.new_zeros(num_parts * num_seqs, *q.shape[1:])
        full_lse = torch.full((num_parts * num_seqs, q.shape[1]), float("-inf"), device=q.device)
        for key, block_table, seq_lens, q_rows, slots in self.decode_parts:
            k_cache, v_cache = key_caches[key]
            out, lse = micro_attention(q[q_rows], k_cache[layer], v_cache[layer], block_table, seq_lens,
                                       check_ranges=False)
            full_out[slots], full_lse[slots] = out, lse
        if num_parts == 1:
            return full_out
        out, _ = scale_reduce(full_out.view(num_parts, *q.shape), full_lse.view(num_parts, *q.shape[:2]))
        return out

    def _prefill(self, layer, q, k, v):
        """((first row, end row), attention output) of each prompt or chunk of the step."""
        scale = 1.0 / math.sqrt(q.shape[-1])
        key_caches = self.locations.key_caches
        for (start, end), how in self.prefill:
            if how[0] == "own":
                yield (start, end), causal_attention(q[start:end], k[start:end], v[start:end])
            elif how[0] == "paged":
                _, key, addresses, n = how
                k_cache, v_cache = key_caches[key]
                kk = k_cache[layer, addresses].flatten(0, 1)[:n]
                vv = v_cache[layer, addresses].flatten(0, 1)[:n]
                yield (start, end), chunk_attention(q[start:end], kk, vv)
            else:
                _, pos_q, parts = how
                partials = []
                for key, addresses, pos_k, valid in parts:
                    k_cache, v_cache = key_caches[key]
                    kk = k_cache[layer, addresses].flatten(0, 1)[valid]
                    vv = v_cache[layer, addresses].flatten(0, 1)[valid]
                    partials.append(causal_partial_attention(q[start:end], kk, vv, pos_q, pos_k, scale))
                yield (start, end), merge(partials).to(q.dtype)
