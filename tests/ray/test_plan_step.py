"""The home's step plan (`plan_step`), built with array operations, equals the plan of the per-token reference it
replaced, on random tables over instances and tiers, for decode and prefill steps, with a cold or a warm table
cache."""
from dataclasses import dataclass, field

import numpy as np
from hypothesis import given, settings, strategies as st

from reference_impl.backends.ray.step import TIER_OF, plan_step
from reference_impl.control.rblock import CPU, DEVICE, RBlock
from reference_impl.model.step_inputs import TableCache


@dataclass
class ReferenceAsk:
    writes: list = field(default_factory=list)  # (tier, address, offset) per K/V row sent
    decode: list = field(default_factory=list)  # (tier, addresses, num_tokens)
    prefill: list = field(default_factory=list)  # (tier, block indexes, addresses, num_tokens, num_new)


def reference_plan(tables, num_tokens, num_new, block_size, is_prefill):
    """The per-token plan the engine used before (a token's write, then each (sequence, location) pair)."""
    asks, q_rows, w_rows, token = {}, {}, {}, 0
    for table, n, new in zip(tables, num_tokens, num_new):
        for pos in range(n - new, n):
            b = table[pos // block_size]
            asks.setdefault(b.inst_id, ReferenceAsk()).writes.append((b.device, b.address, pos % block_size))
            w_rows.setdefault(b.inst_id, []).append(token)
            token += 1
    merge_slots, pieces, spans = {}, [], []
    num_partials, start = 1, 0
    for s, (table, n, new) in enumerate(zip(tables, num_tokens, num_new)):
        held = {}
        for i, b in enumerate(table):
            held.setdefault((b.inst_id, b.device), []).append(i)
        parts = []
        for j, ((inst, tier), indexes) in enumerate(sorted(held.items())):
            ask = asks.setdefault(inst, ReferenceAsk())
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
    return asks, q_rows, w_rows, merge_slots, (pieces, spans) if is_prefill else ([], []), num_partials


def as_lists(ask):
    """A plan's Ask in the reference's form."""
    writes = list(zip((TIER_OF[t] for t in ask.write_tier.tolist()), ask.write_address.tolist(),
                      ask.write_offset.tolist()))
    decode = []
    for tier, row, n in zip(ask.decode_tier.tolist(), ask.decode_table.tolist(), ask.decode_lens.tolist()):
        width = -(-n // BLOCK)
        assert not any(row[width:])  # padding
        decode.append((TIER_OF[tier], row[:width], n))
    prefill = [(tier, list(indexes), list(addresses), n, new) for tier, indexes, addresses, n, new in ask.prefill]
    return ReferenceAsk(writes, decode, prefill)


BLOCK = 4
sequences = st.lists(st.tuples(st.integers(1, 30), st.randoms(use_true_random=False)), min_size=1, max_size=6)


def random_tables(seqs):
    tables, num_tokens, next_id = [], [], 0
    for n, rng in seqs:
        table = []
        for _ in range(-(-n // BLOCK)):
            table.append(RBlock(next_id, rng.randrange(4), rng.choice((DEVICE, CPU)), rng.randrange(32)))
            next_id += 1
        tables.append(table)
        num_tokens.append(n)
    return tables, num_tokens


@settings(max_examples=150, deadline=None)
@given(seqs=sequences, is_prefill=st.booleans(), warm=st.booleans())
def test_plan_equals_the_per_token_reference(seqs, is_prefill, warm):
    tables, num_tokens = random_tables(seqs)
    num_new = num_tokens if is_prefill else [1] * len(tables)
    cache, keys = TableCache(), list(range(len(tables)))
    if warm:  # the cache saw the tables with their last block missing (a decode step appended one since)
        before = [t[:-1] or t for t in tables]
        plan_step(before, [min(n, len(t) * BLOCK) for t, n in zip(before, num_tokens)], [1] * len(tables), BLOCK,
                  False, cache, keys)
    plan = plan_step(tables, num_tokens, num_new, BLOCK, is_prefill, cache, keys)
    asks, q_rows, w_rows, merge_slots, (pieces, spans), num_partials = reference_plan(
        tables, num_tokens, num_new, BLOCK, is_prefill)
    assert {i: as_lists(a) for i, a in plan.asks.items()} == asks
    assert {i: r.tolist() for i, r in plan.q_rows.items()} == q_rows
    assert {i: r.tolist() for i, r in plan.w_rows.items()} == w_rows
    assert {i: r.tolist() for i, r in plan.merge_slots.items()} == merge_slots
    assert plan.pieces == pieces and plan.spans == spans and plan.num_partials == num_partials
    assert plan.num_seqs == (0 if is_prefill else len(tables)) and plan.is_prefill == is_prefill
    assert plan.decode_rows.tolist() == ([] if is_prefill else list(range(len(tables))))
