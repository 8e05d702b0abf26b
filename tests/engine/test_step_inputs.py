"""Step inputs built with array operations equal a token-by-token reference; a decode plan advanced by one token
equals the plan built afresh; prefill over one location (SDPA) and over several (partials) equal plain attention,
and so does a chunked step (decodes beside prompt chunks that read their earlier chunks from the rBlocks)."""
import numpy as np
import torch

from reference_impl.control.rblock import CPU, DEVICE, RBlock
from reference_impl.control.sequence import Sequence
from reference_impl.model.kv_layer import StepKV
from reference_impl.model.llama import contiguous_attention
from reference_impl.model.step_inputs import Locations, TableCache, block_arrays, token_arrays

LAYERS, HKV, HQ, D, BS = 2, 2, 4, 8, 4


def seqs():
    a = Sequence(0, [5, 6, 7], 9)
    b = Sequence(1, [1, 2, 3, 4, 5, 6], 9)
    b.output_ids += [11, 12]
    c = Sequence(2, [9], 9)
    return [a, b, c]


def test_token_arrays_match_a_token_by_token_reference():
    for is_prefill in (True, False):
        t = token_arrays(seqs(), is_prefill)
        ids = [x for s in seqs() for x in (s.token_ids if is_prefill else s.token_ids[-1:])]
        new = [s.num_tokens if is_prefill else 1 for s in seqs()]
        positions = [p for s, m in zip(seqs(), new) for p in range(s.num_tokens - m, s.num_tokens)]
        assert t.token_ids.tolist() == ids and t.positions.tolist() == positions
        assert t.last.tolist() == (np.cumsum(new) - 1).tolist()


def test_chunk_arrays_feed_each_chunk_after_the_prefilled_part():
    a, b, c = seqs()
    b.chunk_tokens, b.prefill_left = 3, 2  # tokens 3..5 of its 8 (a preempted request recomputing its outputs)
    c.chunk_tokens = 1  # its whole one-token prompt: it samples
    t = token_arrays([a, b, c], False, chunked=True)
    assert t.is_mixed and t.sampled.tolist() == [0, 2]  # b's prompt is not whole yet
    assert t.token_ids.tolist() == [7, 4, 5, 6, 9] and t.positions.tolist() == [2, 3, 4, 5, 0]
    assert t.num_tokens.tolist() == [3, 6, 1] and t.num_new.tolist() == [1, 3, 1] and t.last.tolist() == [0, 3, 4]
    b.chunk_tokens, b.prefill_left = 0, 0
    assert not token_arrays([a, b], False, chunked=True).is_mixed


def test_table_cache_follows_appends_and_moves():
    caches = {(0, DEVICE): None, (1, DEVICE): None, (0, CPU): None}
    locations = Locations(caches)
    cache = TableCache()
    table = [RBlock(0, 0, DEVICE, 3), RBlock(1, 1, DEVICE, 5)]
    for change in (None, "append", "move"):
        if change == "append":
            table.append(RBlock(2, 0, CPU, 1))
        if change == "move":
            table[0] = RBlock(0, 1, DEVICE, 7)
        b = block_arrays([table], locations, cache, [42])
        assert [locations.locs[i] for i in b.loc] == [(x.inst_id, x.device) for x in table]
        assert b.address.tolist() == [x.address for x in table]


def caches_of(gen, num_inst=3, blocks=6):
    k = torch.randn(LAYERS, num_inst * blocks, BS, HKV, D, generator=gen)
    v = torch.randn_like(k)
    caches = {(i, DEVICE): (k[:, i * blocks:(i + 1) * blocks], v[:, i * blocks:(i + 1) * blocks]) for i in range(num_inst)}
    storage = {(i, DEVICE): ("dev", i * blocks) for i in range(num_inst)}
    return caches, storage, {"dev": (k, v)}


def assert_same_attention(plan, fresh, shared, layer, q, k, v):
    """`plan` and `fresh` attend from the same K/V state: the same output and the same K/V writes."""
    saved = {key: tuple(x.clone() for x in kv) for key, kv in shared.items()}
    out_plan = plan.attend(layer, q, k, v)
    after_plan = {key: tuple(x.clone() for x in kv) for key, kv in shared.items()}
    for key, kv in shared.items():
        for x, y in zip(kv, saved[key]):
            x.copy_(y)
    out_fresh = fresh.attend(layer, q, k, v)
    torch.testing.assert_close(out_plan, out_fresh, atol=1e-6, rtol=1e-6)
    assert all(torch.equal(x, y) for key in shared for x, y in zip(shared[key], after_plan[key]))


def test_advanced_decode_plan_equals_a_fresh_one():
    gen = torch.Generator().manual_seed(3)
    caches, storage, shared = caches_of(gen)
    tables = [[RBlock(0, 0, DEVICE, 1), RBlock(1, 2, DEVICE, 3), RBlock(2, 1, DEVICE, 0)],
              [RBlock(3, 2, DEVICE, 4), RBlock(4, 0, DEVICE, 2)]]
    lens = [10, 6]
    first = StepKV(caches, tables, lens, [1, 1], BS, False, "cpu", storage, shared)
    q, k, v = (torch.randn(2, h, D, generator=gen) for h in (HQ, HKV, HKV))
    first.attend(0, q, k, v)
    advanced = first.advance([11, 7])
    fresh = StepKV(caches, tables, [11, 7], [1, 1], BS, False, "cpu", storage, shared)
    q, k, v = (torch.randn(2, h, D, generator=gen) for h in (HQ, HKV, HKV))
    assert_same_attention(advanced, fresh, shared, 1, q, k, v)
    assert first.advance([12, 7]) is None and fresh.advance([12, 9]) is None  # 9th token starts a block


def test_prefill_over_one_or_several_locations_equals_plain_attention():
    gen = torch.Generator().manual_seed(4)
    caches, storage, shared = caches_of(gen)
    tables = [[RBlock(0, 1, DEVICE, 2), RBlock(1, 1, DEVICE, 0)],  # 7 tokens at one location: SDPA
              [RBlock(2, 0, DEVICE, 4), RBlock(3, 2, DEVICE, 1), RBlock(4, 0, DEVICE, 5)]]  # 10 tokens over two
    lens = [7, 10]
    q, k, v = (torch.randn(17, h, D, generator=gen) for h in (HQ, HKV, HKV))
    step = StepKV(caches, tables, lens, lens, BS, True, "cpu", storage, shared)
    assert step.prefill[0][1] == ("own",) and step.prefill[1][1][0] == "parts" and len(step.prefill[1][1][2]) == 2
    out = step.attend(0, q, k, v)
    for start, n in ((0, 7), (7, 10)):
        pos = torch.arange(n)
        ref = contiguous_attention(q[start:start + n], k[start:start + n], v[start:start + n], pos, pos)
        torch.testing.assert_close(out[start:start + n], ref, atol=1e-5, rtol=1e-5)


def test_replanned_decode_plan_equals_a_fresh_one():
    """Only the moved or grown tables replanned: the same attention and the same K/V writes as a fresh plan,
    whether the sequences stay one row each in one storage (direct) or spread over instances and tiers."""
    gen = torch.Generator().manual_seed(5)
    caches, storage, shared = caches_of(gen)
    cpu_k = torch.randn(LAYERS, 4, BS, HKV, D, generator=gen)
    caches[(0, CPU)] = (cpu_k, torch.randn_like(cpu_k))
    storage[(0, CPU)] = ("cpu", 0)
    shared["cpu"] = caches[(0, CPU)]
    locations = Locations(caches, storage, shared)
    one_place = [[RBlock(0, 0, DEVICE, 0), RBlock(1, 0, DEVICE, 1)], [RBlock(2, 0, DEVICE, 2)],
                 [RBlock(3, 0, DEVICE, 3), RBlock(4, 0, DEVICE, 4)]]
    spread = [[RBlock(0, 0, DEVICE, 0), RBlock(1, 1, DEVICE, 1)], [RBlock(2, 2, DEVICE, 2)],
              [RBlock(3, 0, CPU, 3), RBlock(4, 1, DEVICE, 4)]]
    moved_one = [one_place[0], [RBlock(5, 0, DEVICE, 5)], one_place[2]]  # a block moved within instance 0
    moved_out = [one_place[0], one_place[1], [RBlock(3, 2, DEVICE, 3), RBlock(4, 0, CPU, 2)]]  # to instance 2, CPU
    grown = [spread[0], spread[1], spread[2] + [RBlock(5, 2, DEVICE, 5)]]  # a block added
    lens, later = [5, 2, 6], [6, 3, 7]
    for before, after, changed in ((one_place, moved_one, [1]), (one_place, moved_out, [2]), (spread, grown, [2]),
                                   (spread, moved_one, [0, 1, 2])):
        first = StepKV(caches, before, lens, [1, 1, 1], BS, False, "cpu", storage, shared)
        replanned = first.replan(changed, later, [after[i] for i in changed], lambda: block_arrays(after, locations))
        fresh = StepKV(caches, after, later, [1, 1, 1], BS, False, "cpu", storage, shared)
        assert replanned.num_partials >= fresh.num_partials  # rows cut at the earlier plan's width
        assert replanned.direct == (after is moved_one and before is one_place)  # still one row a sequence, in order
        assert replanned.whole_rows() is None or all(np.array_equal(x, y) for x, y in zip(replanned.whole_rows()[1:],
                                                                                             fresh.whole_rows()[1:]))
        q, k, v = (torch.randn(3, h, D, generator=gen) for h in (HQ, HKV, HKV))
        assert_same_attention(replanned, fresh, shared, 1, q, k, v)
        assert replanned.advance([7, 4, 8]) is not None  # the replanned plan advances like a fresh one
    first = StepKV(caches, spread, [4, 2, 6], [1, 1, 1], BS, False, "cpu", storage, shared)
    starts_block = first.replan([2], [5, 3, 7], [grown[2]], lambda: block_arrays(grown, locations))
    assert starts_block is None  # an unchanged sequence whose token starts a block (5th token): a full plan


def test_chunked_step_equals_plain_attention_over_the_prompt_so_far():
    """A decode beside two prompt chunks: one whose prompt is at one location (read from its rBlocks), one whose
    prompt spans two (partials merged); the chunks' K/V land in their slots first."""
    gen = torch.Generator().manual_seed(6)
    caches, storage, shared = caches_of(gen)
    tables = [[RBlock(0, 0, DEVICE, 1), RBlock(1, 2, DEVICE, 3), RBlock(2, 1, DEVICE, 0)],  # decode, 10 tokens
              [RBlock(3, 1, DEVICE, 2), RBlock(4, 1, DEVICE, 4), RBlock(5, 1, DEVICE, 5)],  # chunk 4..9 at one place
              [RBlock(6, 0, DEVICE, 4), RBlock(7, 2, DEVICE, 0), RBlock(8, 0, DEVICE, 5)]]  # chunk 5..11 over two
    lens, new = [10, 10, 12], [1, 6, 7]
    step = StepKV(caches, tables, lens, new, BS, False, "cpu", storage, shared)
    assert step.is_mixed and [how[0] for _, how in step.prefill] == ["paged", "parts"]
    q, k, v = (torch.randn(sum(new), h, D, generator=gen) for h in (HQ, HKV, HKV))
    out = step.attend(1, q, k, v)
    start = 0
    for table, n, m in zip(tables, lens, new):
        kk, vv = (torch.cat([caches[(b.inst_id, b.device)][i][1, b.address] for b in table])[:n] for i in (0, 1))
        torch.testing.assert_close(kk[n - m:], k[start:start + m])  # stored in place before attending
        pos = torch.arange(n)
        ref = contiguous_attention(q[start:start + m], kk, vv, pos[n - m:], pos)
        torch.testing.assert_close(out[start:start + m], ref, atol=1e-5, rtol=1e-5)
        start += m
