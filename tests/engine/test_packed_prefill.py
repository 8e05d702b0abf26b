"""Several prompts of different lengths prefilled in one step (one forward over the packed rows, attention within
each prompt only, the LM head on each prompt's last token) give transformers' greedy tokens; on a GPU the varlen
FlashAttention call equals one SDPA a prompt."""
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import reference_impl.backends.local as local
from reference_impl.backends.local import generate
from reference_impl.control.engine import EngineConfig
from reference_impl.model.llama import load_model
from reference_impl.model.prompt_attention import causal_attention, packed_causal_attention, varlen_fits

sys.path.insert(0, str(Path(__file__).parents[1] / "designs"))
from tiny_cases import NUM_NEW, hf_folder, hf_greedy  # noqa: E402,F401  (hf_folder: a fixture)

PROMPTS = [[(13 * i + 7) % 256 for i in range(n)] for n in (3, 29, 1, 12)]  # uneven; one a single token


@pytest.fixture
def plans(monkeypatch):
    """Every StepKV the local backend plans."""
    seen = []
    step_kv = local.LocalBackend.step_kv

    def recording(self, *args):
        seen.append(step_kv(self, *args))
        return seen[-1]
    monkeypatch.setattr(local.LocalBackend, "step_kv", recording)
    return seen


@pytest.mark.parametrize("hf_folder", [2], indirect=True, ids=["gqa"])  # (MHA: test_engine_equivalence.py)
def test_prompts_packed_in_one_prefill_step_give_transformers_tokens(hf_folder, plans):
    lm_head_rows = []
    model = load_model(hf_folder)
    logits = model.logits
    model.logits = lambda hidden: lm_head_rows.append(hidden.shape[0]) or logits(hidden)
    result = generate(model, PROMPTS, NUM_NEW, EngineConfig(1, 96, block_size=4), ignore_eos=True)
    first = plans[0]
    assert first.is_prefill and first.num_seqs == len(PROMPTS)  # every prompt in the first step
    assert all(how == ("own",) for _, how in first.prefill)
    assert lm_head_rows[0] == len(PROMPTS)  # one row a prompt, not one a prompt token
    for prompt, tokens in zip(PROMPTS, result.token_ids):
        assert tokens == hf_greedy(hf_folder, prompt)[0]


def per_prompt(q, k, v, lens):
    bounds = np.concatenate(([0], np.cumsum(lens))).tolist()
    return torch.cat([causal_attention(q[a:b], k[a:b], v[a:b]) for a, b in zip(bounds[:-1], bounds[1:])])


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("heads", [(8, 8), (8, 2), (4, 1)], ids=["mha", "gqa", "mqa"])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_varlen_equals_one_sdpa_a_prompt(dtype, heads, head_dim):
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    lens = [1, 17, 200, 64, 333]
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(sum(lens), h, head_dim, generator=gen, device="cuda", dtype=dtype)
               for h in (heads[0], heads[1], heads[1]))
    assert varlen_fits(q)
    cu = torch.tensor(np.concatenate(([0], np.cumsum(lens))), dtype=torch.int32, device="cuda")
    packed = packed_causal_attention(q, k, v, cu, max(lens))
    torch.testing.assert_close(packed, per_prompt(q, k, v, lens), atol=2e-3 if dtype == torch.float16 else 1.6e-2,
                               rtol=0)


@pytest.mark.gpu
@pytest.mark.parametrize("hf_folder", [2], indirect=True, ids=["gqa"])
def test_engine_prefill_varlen_on_equals_off(hf_folder, plans):
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    model = local.to_device(load_model(hf_folder, dtype=torch.float16), "cuda")
    config = EngineConfig(1, 96, block_size=4)
    runs = {}
    for packed in (True, False):
        plans.clear()
        engine = local.Engine(config, local.LocalBackend(model, config, device="cuda", record_logits=True, eager=True,
                                                         packed_prefill=packed))
        seqs = [local.Sequence(i, list(p), 4, None) for i, p in enumerate(PROMPTS)]
        for seq in seqs:
            engine.add_request(seq)
        engine.run()
        assert (plans[0].packed is not None) == packed  # the varlen call ran, or one SDPA a prompt
        runs[packed] = seqs
    for on, off in zip(runs[True], runs[False]):
        torch.testing.assert_close(on.logits[0], off.logits[0], atol=2e-2, rtol=0)  # the prefill step's logits
        assert on.output_ids[0] == off.output_ids[0]
