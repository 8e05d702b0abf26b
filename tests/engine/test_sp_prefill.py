"""Sequence-parallel prefill in one process (backends/sp_prefill.py): two prompts split into segments over three
instances in crossed orders (instance 2 before 1 in one prompt, after it in the other), every member a thread: each
prompt's last hidden state equals a whole-prompt causal prefill, and each member's rBlocks hold exactly its
segment's K/V as that prefill computes them."""
import numpy as np
import torch

from reference_impl.backends.sp_prefill import plan_segments, prefill_in_threads
from reference_impl.control.rblock import DEVICE, RBlock
from reference_impl.control.sequence import Sequence
from reference_impl.model.kv_layer import causal_attention
from reference_impl.model.llama import TINY, random_model

BS = 4


def test_segments_over_crossed_members_equal_a_whole_prefill():
    model = random_model(TINY, seed=5)
    c = model.config
    caches = {i: {DEVICE: tuple(torch.zeros(c.num_layers, 8, BS, c.num_kv_heads, c.head_dim, dtype=model.dtype)
                                for _ in range(2))} for i in range(3)}
    rng = np.random.default_rng(0)
    seqs = [Sequence(0, rng.integers(0, c.vocab_size, 22).tolist(), 1),
            Sequence(1, rng.integers(0, c.vocab_size, 13).tolist(), 1)]
    # prompt 0: blocks 0-1 on instance 0, 2-3 on 2, 4-5 on 1; prompt 1: block 0 on 0, 1 on 1, 2-3 on 2
    layout = [[(0, 0), (0, 1), (2, 0), (2, 1), (1, 0), (1, 1)], [(0, 2), (1, 2), (2, 2), (2, 3)]]
    tables = [[RBlock(10 * s + j, i, DEVICE, a) for j, (i, a) in enumerate(t)] for s, t in enumerate(layout)]
    plan = plan_segments(0, seqs, tables, BS)
    assert plan.degrees == [3, 3] and plan.last_members() == [1, 2]
    hidden = prefill_in_threads(plan, model, caches.__getitem__, BS, "cpu", c.hidden_size)
    for s, (seq, table) in enumerate(zip(seqs, tables)):
        n, kv = seq.num_tokens, {}

        def attend(layer, q, k, v):
            kv[layer] = (k.clone(), v.clone())
            return causal_attention(q, k, v)
        whole = model.forward(torch.tensor(seq.prompt_ids), torch.arange(n), attend)
        torch.testing.assert_close(hidden[s], whole[-1])
        for t in range(n):  # token t's K/V in the block its member holds
            block = table[t // BS]
            k_cache, v_cache = caches[block.inst_id][DEVICE]
            for layer, (k, v) in kv.items():
                torch.testing.assert_close(k_cache[layer, block.address, t % BS], k[t])
                torch.testing.assert_close(v_cache[layer, block.address, t % BS], v[t])


def test_a_batch_whole_on_its_home_or_off_the_device_tier_is_no_segment_step():
    seqs = [Sequence(0, list(range(9)), 1)]
    home = [[RBlock(j, 0, DEVICE, j) for j in range(3)]]
    assert plan_segments(0, seqs, home, BS) is None
    twice = [[RBlock(0, 0, DEVICE, 0), RBlock(1, 1, DEVICE, 0), RBlock(2, 0, DEVICE, 1)]]
    assert plan_segments(0, seqs, twice, BS) is None  # instance 0 holds two runs of the prompt
