import pytest
import torch

from reference_impl.backends.local import generate
from reference_impl.control.engine import EngineConfig
from reference_impl.control.sampling import GREEDY, SamplingParams
from reference_impl.errors import InputError
from reference_impl.model.llama import random_model
from reference_impl.model.sampling import Sampler, top_p_mask


def test_greedy_is_argmax():
    logits = torch.randn(5, 50, generator=torch.Generator().manual_seed(1))
    out = Sampler("cpu").sample(logits, [GREEDY] * 5, [0] * 5)
    assert out.tolist() == logits.argmax(-1).tolist()


def test_top_p_keeps_the_nucleus():
    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05]])
    kept = top_p_mask(probs, torch.tensor([0.7]))
    assert (kept > 0).tolist() == [[True, True, False, False]]
    assert (top_p_mask(probs, torch.tensor([1e-6])) > 0).sum() == 1  # the most likely token always stays


def test_sampled_frequencies_follow_the_distribution():
    logits = torch.log(torch.tensor([0.6, 0.3, 0.1]))
    sampler = Sampler("cpu", seed=3)
    draws = torch.cat([sampler.sample(logits.expand(500, 3), [SamplingParams(temperature=1.0)] * 500, [0] * 500)
                       for _ in range(8)])
    freq = torch.bincount(draws, minlength=3).float() / len(draws)
    assert torch.allclose(freq, torch.tensor([0.6, 0.3, 0.1]), atol=0.03)
    nucleus = sampler.sample(logits.expand(400, 3), [SamplingParams(temperature=1.0, top_p=0.8)] * 400, [0] * 400)
    assert set(nucleus.tolist()) == {0, 1}


def test_seeded_rows_do_not_depend_on_the_batch():
    logits = torch.randn(6, 40, generator=torch.Generator().manual_seed(0))
    seeded = SamplingParams(temperature=1.0, seed=7)
    alone = Sampler("cpu", seed=1).sample(logits[2:3], [seeded], [4])
    params = [SamplingParams(temperature=0.8)] * 2 + [seeded] + [GREEDY] * 3
    batched = Sampler("cpu", seed=2).sample(logits, params, [0, 0, 4, 0, 0, 0])
    assert batched[2] == alone[0]
    assert batched[3:].tolist() == logits[3:].argmax(-1).tolist()


@pytest.mark.parametrize("kwargs", [{"temperature": -1}, {"temperature": float("nan")}, {"top_p": 0},
                                    {"top_p": 1.5}, {"seed": -3}, {"seed": 1.5}])
def test_bad_params_are_refused(kwargs):
    with pytest.raises(InputError):
        SamplingParams(**kwargs)


def test_generate_with_a_seed_repeats_and_greedy_stays_the_reference():
    model = random_model()
    config = EngineConfig(num_instances=2, blocks_per_instance=8, block_size=4)
    prompts = [[1, 2, 3, 4, 5], [9, 8, 7]]
    params = SamplingParams(temperature=1.0, top_p=0.9, seed=11)
    a = generate(model, prompts, 6, config, sampling=params).token_ids
    b = generate(model, prompts[:1], 6, config, sampling=params).token_ids
    assert a[0] == b[0]  # the same seed, another batch: the same tokens
    greedy = generate(model, prompts, 6, config).token_ids
    assert greedy == generate(model, prompts, 6, config, sampling=SamplingParams(temperature=1e-4)).token_ids
