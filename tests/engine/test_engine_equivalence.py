"""The heart of it: per-step logits of the engine with one roomy instance, of the engine with most KV remote
(small budgets, KV spilling and moving between instances), and of transformers' LlamaForCausalLM agree."""
import os

import pytest
import torch

from reference_impl.backends.local import generate
from reference_impl.control.engine import EngineConfig, GManagerConfig, step_clock
from reference_impl.model.llama import load_model

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # everything is local: never reach the Hub
transformers = pytest.importorskip("transformers")

PROMPTS = [[3, 17, 99, 4, 250, 8, 61, 12, 5, 77, 31, 2], [200, 1, 45, 45, 9, 130, 7, 88, 19, 240, 66, 3, 14, 90]]
NUM_NEW = 64
BLOCK = 4


@pytest.fixture(scope="module", params=[4, 2], ids=["mha", "gqa"])
def hf_folder(request, save_hf_llama):
    return save_hf_llama(f"llama_kv{request.param}", 1234 + request.param, num_kv_heads=request.param)


def hf_greedy(folder, prompt):
    # the folder holds fp32 weights; eager attention keeps the reference plain
    model = transformers.LlamaForCausalLM.from_pretrained(folder, attn_implementation="eager").float().eval()
    tokens, logits = [], []
    with torch.no_grad():
        out = model(torch.tensor([prompt]), use_cache=True)
        for _ in range(NUM_NEW):
            row = out.logits[0, -1].float()
            logits.append(row)
            tokens.append(int(row.argmax()))
            out = model(torch.tensor([[tokens[-1]]]), past_key_values=out.past_key_values, use_cache=True)
    return tokens, logits


def spread_moves(engine):
    """Push every request's local blocks (all but the tail) to the instance with the most room."""
    for rm in engine.rmanagers.values():
        for req_id, table in rm.tables.items():
            local = sum(b.inst_id == rm.inst_id for b in table[:-1])
            others = sorted((p for p in engine.rmanagers.values() if p is not rm), key=lambda p: -p.num_lendable)
            if local and others:
                rm.move_kvcache(req_id, local, others[0].inst_id)


def test_engine_matches_transformers(hf_folder):
    model = load_model(hf_folder)
    roomy = generate(model, PROMPTS, NUM_NEW, EngineConfig(1, 64, block_size=BLOCK), ignore_eos=True,
                     record_logits=True)
    remote_fraction, swaps = [], []

    def spread(engine):
        spread_moves(engine)
        swaps.append(engine.num_swaps)
        blocks = [(rm.inst_id, b.inst_id) for rm in engine.rmanagers.values() for t in rm.tables.values() for b in t]
        if blocks:
            remote_fraction.append(sum(h != w for h, w in blocks) / len(blocks))

    # distkv-llm's roles (an instance borrows and lends at once): debt cycles form, so DGFM swaps real KV
    spread_cfg = EngineConfig(4, 12, block_size=BLOCK, move_chunk_tokens=8, exclusive_roles=False,
                              gmanager=GManagerConfig(interval_s=3))  # a round every third step (step_clock)
    spread = generate(model, PROMPTS, NUM_NEW, spread_cfg, ignore_eos=True, record_logits=True, on_step=spread,
                      clock=step_clock())
    assert max(remote_fraction) > 0.5 and sum(remote_fraction) / len(remote_fraction) > 0.5
    assert swaps[-1] > 0  # DGFM recalled and swapped real KV on the way
    assert all(len(p) >= 3 for p in spread.placement)  # each request ended on three or more instances
    for i, prompt in enumerate(PROMPTS):
        ref_tokens, ref_logits = hf_greedy(hf_folder, prompt)
        assert roomy.token_ids[i] == ref_tokens == spread.token_ids[i]
        assert len(roomy.logits[i]) == len(spread.logits[i]) == NUM_NEW
        for a, b, ref in zip(roomy.logits[i], spread.logits[i], ref_logits):
            torch.testing.assert_close(a, ref, atol=1e-4, rtol=0)
            torch.testing.assert_close(b, ref, atol=1e-4, rtol=0)
