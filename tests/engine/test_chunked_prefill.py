"""Chunked prefill on the engine: steps that decode some requests and prefill prompt chunks of others give the
tokens of transformers' LlamaForCausalLM and of whole-prompt prefill, with KV at one location or spread."""
import os

import numpy as np
import pytest
import torch

import reference_impl.backends.local as local
from reference_impl.backends.local import generate
from reference_impl.control.engine import EngineConfig, GManagerConfig, step_clock
from reference_impl.model.llama import load_model

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")

BLOCK = 4
NUM_NEW = 10
PROMPT_LENS = (37, 9, 23, 50, 5, 14)  # longer than a chunk, shorter than one, several chunks long


@pytest.fixture(scope="module")
def hf_model(save_hf_llama):
    folder = save_hf_llama("llama_chunked", 7)
    return transformers.LlamaForCausalLM.from_pretrained(folder, attn_implementation="eager").float().eval(), folder


@pytest.fixture(scope="module")
def prompts():
    rng = np.random.default_rng(11)
    return [rng.integers(0, 256, n).tolist() for n in PROMPT_LENS]


def hf_greedy(model, prompt):
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), max_new_tokens=NUM_NEW, do_sample=False, pad_token_id=0)
    return out[0, len(prompt):].tolist()


@pytest.fixture(scope="module")
def references(hf_model, prompts):
    """transformers' greedy tokens, and the engine's with whole-prompt prefill (tokens and logits)."""
    reference, folder = hf_model
    whole = generate(load_model(folder), prompts, NUM_NEW, EngineConfig(1, 64, block_size=BLOCK), ignore_eos=True,
                     record_logits=True)
    return [hf_greedy(reference, p) for p in prompts], whole


@pytest.fixture
def steps(monkeypatch):
    """(decoding sequences, prompt chunks, how each chunk attends) of every step the local backend runs."""
    seen = []
    step_kv = local.LocalBackend.step_kv

    def recording(self, instance, seqs, tokens, is_prefill):
        kv = step_kv(self, instance, seqs, tokens, is_prefill)
        seen.append((int((tokens.num_new == 1).sum()), int((tokens.num_new > 1).sum()),
                     {how[0] for _, how in kv.prefill}))
        return kv
    monkeypatch.setattr(local.LocalBackend, "step_kv", recording)
    return seen


@pytest.mark.parametrize("chunk", [8, 20])
@pytest.mark.parametrize("pooled", [False, True], ids=["one-instance", "spread"])
def test_chunked_prefill_gives_transformers_tokens(hf_model, prompts, references, steps, chunk, pooled):
    hf_tokens, whole = references
    config = (EngineConfig(3, 14, block_size=BLOCK, chunked_prefill_tokens=chunk, gmanager=GManagerConfig(interval_s=2))
              if pooled else EngineConfig(1, 64, block_size=BLOCK, chunked_prefill_tokens=chunk))
    result = generate(load_model(hf_model[1]), prompts, NUM_NEW, config, ignore_eos=True, record_logits=True,
                      clock=step_clock())  # a round every second step
    assert result.token_ids == whole.token_ids == hf_tokens
    for chunked_logits, whole_logits in zip(result.logits, whole.logits):
        assert len(chunked_logits) == NUM_NEW  # one sampled token a step once the prompt is whole, none before
        torch.testing.assert_close(torch.stack(chunked_logits), torch.stack(whole_logits), atol=1e-4, rtol=0)
    assert any(decodes and chunks for decodes, chunks, _ in steps)  # decodes ran beside prompt chunks
    assert sum(chunks for _, chunks, _ in steps) > len(PROMPT_LENS)  # prompts took several steps
    kinds = set().union(*(how for _, _, how in steps))
    assert "paged" in kinds  # a chunk read its prompt's earlier chunks from the rBlocks
    if pooled:  # the longest prompt's KV spanned instances (14 blocks of 4 tokens each): partials merged
        assert len(result.placement[PROMPT_LENS.index(50)]) >= 2 and "parts" in kinds


@pytest.mark.gpu
@pytest.mark.parametrize("pooled", [False, True], ids=["one-instance", "spread"])
def test_chunked_prefill_on_cuda_gives_the_cpus_tokens(hf_model, prompts, references, pooled):
    """On a GPU: mixed steps run eagerly beside graph-replayed decode steps, SDPA's end-aligned causal mask on
    the device; the CPU's whole-prompt tokens."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    config = (EngineConfig(3, 14, block_size=BLOCK, chunked_prefill_tokens=8) if pooled
              else EngineConfig(1, 64, block_size=BLOCK, chunked_prefill_tokens=8))
    result = generate(load_model(hf_model[1]), prompts, NUM_NEW, config, ignore_eos=True, device="cuda")
    assert result.token_ids == references[1].token_ids
