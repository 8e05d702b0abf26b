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


def test_a_request_larger_than_the_memory_instances_is_refused_at_once(hf_folder):
    """Compute instances hold no rBlocks: a request's room is the memory instances' (2 x 6 blocks of BLOCK tokens),
    not the whole cluster's, so one that needs more is refused with a reason instead of waiting forever."""
    prompt = [(5 * i + 1) % 200 for i in range(12 * BLOCK)]  # 12 blocks, plus the new tokens: over 12
    with pytest.raises(InputError, match="needs 13 rBlocks .* has 12"):
        generate_lamina(load_model(hf_folder), [prompt], BLOCK, EngineConfig(4, 6, block_size=BLOCK), num_compute=2)


def test_a_lamina_server_advertises_the_memory_instances_room():
    from reference_impl.server.config import ServerConfig, max_model_len

    served = ServerConfig(num_instances=4, blocks_per_instance=6, block_size=BLOCK, system="lamina", backend="ray")
    assert max_model_len(served.engine_run()) == 2 * 6 * BLOCK  # two memory instances; the compute ones hold none
    pooled = ServerConfig(num_instances=4, blocks_per_instance=6, block_size=BLOCK)
    assert max_model_len(pooled.engine_run()) == 4 * 6 * BLOCK
