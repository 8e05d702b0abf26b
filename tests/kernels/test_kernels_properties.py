"""Properties of DistAttention: split- and order-independence, empty parts, lse = logsumexp of scores."""
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from reference_impl.kernels.equivalence import make_case
from reference_impl.kernels import dist_attention, micro_attention, scale_reduce
from reference_impl.kernels.launch_config import CONFIGS, context_class
from reference_impl.kernels.reference import gather_kv
from reference_impl.kernels.triton_launch import micro_attention_triton

lengths = st.lists(st.integers(0, 300), min_size=1, max_size=5)
heads = st.sampled_from([(4, 4), (8, 2), (8, 1)])


@settings(max_examples=40, deadline=None)
@given(lens=lengths, heads=heads, block_size=st.sampled_from([8, 16]), seed=st.integers(0, 2**31 - 1))
def test_result_independent_of_split_and_merge_order(lens, heads, block_size, seed):
    case = make_case(lens, *heads, 64, block_size, torch.float32, seed=seed % 1000)
    rng = np.random.default_rng(seed)
    whole_out, whole_lse = dist_attention(case.q, [(case.k_cache, case.v_cache, *case.whole())], backend="torch")
    parts = [(case.k_cache, case.v_cache, *tables) for tables in case.split(rng)]
    order = rng.permutation(len(parts))
    out, lse = dist_attention(case.q, [parts[i] for i in order], backend="torch")
    torch.testing.assert_close(out, whole_out, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(lse, whole_lse, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_merging_only_empty_parts_gives_zeros_and_minus_inf(backend):
    case = make_case([0, 0, 0], 8, 2, 64, 8, torch.float32, seed=3)
    table, lens = case.whole()
    out, lse = micro_attention(case.q, case.k_cache, case.v_cache, table, lens, backend=backend)
    merged_out, merged_lse = scale_reduce(torch.stack([out, out]), torch.stack([lse, lse]), backend=backend)
    for o, l in ((out, lse), (merged_out, merged_lse)):
        assert not torch.isnan(o).any() and not torch.isnan(l).any()
        assert torch.equal(o, torch.zeros_like(o))
        assert torch.isneginf(l).all()


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_empty_part_contributes_nothing(backend):
    case = make_case([40, 9], 4, 4, 80, 8, torch.float32, seed=5)
    table, lens = case.whole()
    out, lse = micro_attention(case.q, case.k_cache, case.v_cache, table, lens, backend=backend)
    empty_out, empty_lse = torch.zeros_like(out), torch.full_like(lse, float("-inf"))
    merged_out, merged_lse = scale_reduce(torch.stack([empty_out, out]), torch.stack([empty_lse, lse]),
                                          backend=backend)
    torch.testing.assert_close(merged_out, out, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(merged_lse, lse, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_lse_equals_torch_logsumexp_of_scaled_scores(backend):
    case = make_case([97, 1, 33], 8, 2, 64, 16, torch.float32, seed=11)
    table, lens = case.whole()
    scale = 0.3
    _, lse = micro_attention(case.q, case.k_cache, case.v_cache, table, lens, scale=scale, backend=backend)
    for seq, (k, _) in enumerate(gather_kv(case.k_cache, case.v_cache, table, lens)):
        k = k.repeat_interleave(4, dim=1).transpose(0, 1)  # [Hq, len, D]
        scores = (case.q[seq][:, None, :] @ k.transpose(1, 2))[:, 0, :] * scale
        torch.testing.assert_close(lse[seq], torch.logsumexp(scores, dim=-1), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("config_name", sorted(CONFIGS))
def test_every_context_class_kernel_with_in_call_splits(config_name):
    """Each class's tile shape, and split-KV inside one call (several splits merged by ScaleReduce)."""
    cfg = CONFIGS[config_name]
    case = make_case([300, 5, 0], 8, 2, 64, 16, torch.float32, seed=7)
    table, lens = case.whole()
    ref_out, ref_lse = case.reference()
    for tokens_per_split in (cfg.tile_n, 4 * cfg.tile_n, 10_000):
        out, lse = micro_attention_triton(case.q, case.k_cache, case.v_cache, table, lens, case.q.shape[-1] ** -0.5,
                                          config=cfg, tokens_per_split=tokens_per_split)
        torch.testing.assert_close(out, ref_out, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(lse, ref_lse, atol=1e-5, rtol=1e-5)


def test_context_classes_follow_the_paper_bounds():
    assert [context_class(n) for n in (1, 8192, 8193, 32768, 32769, 2_000_000)] == \
        ["normal", "normal", "long", "long", "ultra", "ultra"]


def test_torch_path_chunks_merge_to_the_one_chunk_result_and_a_first_chunk_needs_no_merge(monkeypatch):
    """The CPU path walks the KV in chunks and merges them with ScaleReduce; its first chunk is taken as it is,
    which is what merging it with the empty partial gives, bit for bit."""
    from reference_impl.kernels import torch_impl

    case = make_case([300, 17, 0, 129], 8, 2, 64, 8, torch.float32, seed=11)
    table, lens = case.whole()
    scale = 1.0 / 8.0
    whole_out, whole_lse = torch_impl.micro_attention_torch(case.q, case.k_cache, case.v_cache, table, lens, scale)
    empty = (torch.zeros_like(whole_out), torch.full_like(whole_lse, float("-inf")))
    merged_out, merged_lse = torch_impl.scale_reduce_torch(torch.stack([empty[0], whole_out]),
                                                           torch.stack([empty[1], whole_lse]))
    assert torch.equal(merged_out, whole_out) and torch.equal(merged_lse, whole_lse)
    monkeypatch.setattr(torch_impl, "WORKSPACE_BYTES", 8 * 2 * 64 * 4 * 3)  # 3 blocks of 8 tokens a chunk
    out, lse = torch_impl.micro_attention_torch(case.q, case.k_cache, case.v_cache, table, lens, scale)
    torch.testing.assert_close(out, whole_out, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(lse, whole_lse, atol=1e-5, rtol=1e-5)
