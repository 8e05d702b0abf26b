"""Prefill/decode disaggregation on the local engine (real model, real KV): every request is prefilled on a prefill
instance, moved whole with its KV to a decode instance, and decoded there; its tokens equal one instance's and
transformers' greedy generation (the reference of tests/engine)."""

import pytest

from reference_impl.backends.local import generate
from reference_impl.control.engine import EngineConfig
from reference_impl.errors import InputError
from reference_impl.model.llama import load_model
from reference_impl.systems.pd_disagg.local import generate_pd

from tiny_cases import BLOCK, NUM_NEW, PROMPTS, hf_folder, hf_greedy  # noqa: F401  (hf_folder: a fixture)


def test_prefilled_on_one_decoded_on_another_as_one_instance(hf_folder):
    model = load_model(hf_folder)
    config = EngineConfig(3, 64, block_size=BLOCK)  # 1 prefill instance, 2 decode instances
    result, counts = generate_pd(model, PROMPTS, NUM_NEW, config, num_prefill=1, ignore_eos=True)
    assert counts.moved == len(PROMPTS) and counts.decoded_on_prefill == 0
    assert counts.moved_blocks >= sum(-(-len(p) // BLOCK) for p in PROMPTS)  # every prompt's KV crossed over
    for placement in result.placement:
        assert set(placement) <= {1, 2}  # every request ended on a decode instance
    one = generate(model, PROMPTS, NUM_NEW, EngineConfig(1, 192, block_size=BLOCK), ignore_eos=True)
    assert result.token_ids == one.token_ids
    assert result.token_ids[0] == hf_greedy(hf_folder, PROMPTS[0])[0]


def test_a_split_needs_both_sides(hf_folder):
    with pytest.raises(InputError, match="prefill instances"):
        generate_pd(load_model(hf_folder), PROMPTS[:1], 2, EngineConfig(2, 16, block_size=BLOCK), num_prefill=2)
