"""KV layer: partials per location (separate caches or slices of one tensor) and split causal prefill are exact."""
import math

import torch

from reference_impl.model.kv_layer import StepKV, causal_partial_attention, merge
from reference_impl.model.llama import contiguous_attention
from reference_impl.control.rblock import DEVICE, RBlock

LAYERS, HKV, HQ, D, BS = 2, 2, 6, 8, 4


def test_split_causal_prefill_matches_contiguous():
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(13, h, D, generator=gen) for h in (HQ, HKV, HKV))
    pos = torch.arange(13)
    parts = [causal_partial_attention(q, k[idx], v[idx], pos, pos[idx], 1 / math.sqrt(D))
             for idx in (torch.tensor([0, 5, 7, 12]), torch.tensor([1, 2, 3, 4]), torch.tensor([6, 8, 9, 10, 11]))]
    torch.testing.assert_close(merge(parts), contiguous_attention(q, k, v, pos, pos), atol=1e-5, rtol=1e-5)


def test_decode_partials_same_with_and_without_shared_storage():
    gen = torch.Generator().manual_seed(1)
    num_inst, blocks = 3, 5
    shared_k = torch.randn(LAYERS, num_inst * blocks, BS, HKV, D, generator=gen)
    shared_v = torch.randn_like(shared_k)
    caches = {(i, DEVICE): (shared_k[:, i * blocks:(i + 1) * blocks], shared_v[:, i * blocks:(i + 1) * blocks])
              for i in range(num_inst)}
    separate = {loc: (k.clone(), v.clone()) for loc, (k, v) in caches.items()}
    storage = {(i, DEVICE): ("dev", i * blocks) for i in range(num_inst)}
    tables = [[RBlock(0, 0, DEVICE, 1), RBlock(1, 2, DEVICE, 3), RBlock(2, 1, DEVICE, 0)],  # 11 tokens
              [RBlock(3, 2, DEVICE, 4)],  # 2 tokens, all remote
              [RBlock(4, 1, DEVICE, 2), RBlock(5, 0, DEVICE, 0)]]  # 5 tokens
    lens = [11, 2, 5]
    q, k, v = (torch.randn(3, h, D, generator=gen) for h in (HQ, HKV, HKV))
    a = StepKV(caches, tables, lens, [1, 1, 1], BS, False, "cpu", storage, {"dev": (shared_k, shared_v)})
    b = StepKV(separate, tables, lens, [1, 1, 1], BS, False, "cpu")
    out_a, out_b = a.attend(1, q, k, v), b.attend(1, q, k, v)
    torch.testing.assert_close(out_a, out_b, atol=1e-6, rtol=1e-6)
    for s, (table, n) in enumerate(zip(tables, lens)):  # against contiguous attention over the gathered KV
        ks = torch.cat([separate[(blk.inst_id, blk.device)][0][1, blk.address] for blk in table])[:n]
        vs = torch.cat([separate[(blk.inst_id, blk.device)][1][1, blk.address] for blk in table])[:n]
        ref = contiguous_attention(q[s:s + 1], ks, vs, torch.tensor([n - 1]), torch.arange(n))
        torch.testing.assert_close(out_a[s:s + 1], ref, atol=1e-5, rtol=1e-5)


def test_row_width_keeps_uniform_rows_and_cuts_uneven_ones():
    from reference_impl.model.kv_layer import row_width

    assert row_width([6] * 10) == 6
    assert row_width([1, 1, 1, 6]) < 6


def test_decode_rows_cut_to_single_blocks_match(monkeypatch):
    import reference_impl.model.kv_layer as kv_layer

    gen = torch.Generator().manual_seed(2)
    k_cache = torch.randn(LAYERS, 8, BS, HKV, D, generator=gen)
    v_cache = torch.randn_like(k_cache)
    caches = {(0, DEVICE): (k_cache, v_cache)}
    tables = [[RBlock(i, 0, DEVICE, a) for i, a in enumerate((5, 1, 7))], [RBlock(9, 0, DEVICE, 2)]]
    q, k, v = (torch.randn(2, h, D, generator=gen) for h in (HQ, HKV, HKV))
    whole = StepKV(caches, tables, [10, 3], [1, 1], BS, False, "cpu").attend(0, q, k, v)
    monkeypatch.setattr(kv_layer, "row_width", lambda num_blocks: 1)
    cut = StepKV(caches, tables, [10, 3], [1, 1], BS, False, "cpu")
    assert cut.num_partials == 3
    torch.testing.assert_close(cut.attend(0, q, k, v), whole, atol=1e-6, rtol=1e-6)
