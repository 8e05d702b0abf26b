"""Lamina's attention offloading on the local engine (real model, real KV): compute instances hold no KV, memory
instances hold all of it and compute its attention (DistAttention's remote path); the tokens equal one instance's
and transformers' greedy generation (the reference of tests/engine)."""

import pytest

from reference_impl.backends.local import generate
from reference_impl.control.engine import EngineConfig
from reference_impl.errors import InputError
from reference_impl.model.llama import load_model
from reference_impl.systems.lamina.local import generate_lamina

from tiny_cases import BLOCK, NUM_NEW, PROMPTS, hf_folder, hf_greedy  # noqa: F401  (hf_folder: a fixture)


def test_kv_on_memory_instances_decodes_as_one_instance(hf_folder):
    model = load_model(hf_folder)
    result, engine = generate_lamina(model, PROMPTS, NUM_NEW, EngineConfig(4, 48, block_size=BLOCK), num_compute=2,
                                     ignore_eos=True)
    assert all(inst.rm.pool.num_capacity == 0 for inst in engine.instances[:2])  # compute instances hold no KV
    for placement in result.placement:
        assert placement and set(placement) <= {2, 3}  # every rBlock on a memory instance
    assert {i for p in result.placement for i in p} == {2, 3}  # both memory instances used
    one = generate(model, PROMPTS, NUM_NEW, EngineConfig(1, 192, block_size=BLOCK), ignore_eos=True)
    assert result.token_ids == one.token_ids
    assert result.token_ids[1] == hf_greedy(hf_folder, PROMPTS[1])[0]


def test_needs_compute_and_memory_instances(hf_folder):
    with pytest.raises(InputError, match="compute instances"):
        generate_lamina(load_model(hf_folder), PROMPTS[:1], 2, EngineConfig(2, 16, block_size=BLOCK), num_compute=2)
