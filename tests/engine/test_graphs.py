"""Decode from CUDA graphs: the buckets, the static-buffer step (run eagerly without CUDA, so the padding and the
buffers the graphs replay are checked on CPU) giving the eager engine's tokens, and on a GPU graphs on = off."""
import pytest
import torch

from reference_impl.backends.local import generate
from reference_impl.control.engine import EngineConfig
from reference_impl.model.graphs import graph_batch_sizes
from reference_impl.model.llama import ModelConfig, random_model

SMALL = ModelConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_layers=2, num_heads=4, num_kv_heads=2)
PROMPTS = [[3, 9, 27, 17, 51], [1, 2], list(range(40)), [7] * 13, [5, 6, 7]]


def test_buckets_are_powers_to_eight_then_steps_of_sixteen_up_to_the_cap():
    assert graph_batch_sizes(64) == [1, 2, 4, 8, 16, 32, 48, 64]
    assert graph_batch_sizes(20) == [1, 2, 4, 8, 16, 20]
    assert graph_batch_sizes(3) == [1, 2, 3]


@pytest.mark.parametrize("instances, blocks", [(1, 64), (3, 9)], ids=["one-instance", "spread"])
def test_static_buffer_steps_give_the_eager_tokens(instances, blocks):
    model = random_model(SMALL, seed=5)
    config = EngineConfig(instances, blocks, block_size=4, max_batch_size=5)
    eager = generate(model, PROMPTS, 12, config, ignore_eos=True, eager=True)
    steps = []
    static = generate(model, PROMPTS, 12, config, ignore_eos=True, eager=False,
                      on_step=lambda engine: steps.append(engine.backend.graphs))
    assert static.token_ids == eager.token_ids
    graphs = steps[-1]
    assert graphs.num_replays > 0  # the padded static-buffer path ran (batches 5, 3, ... pad to 8, 4, ...)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_cuda_graphs_on_equal_off(dtype):
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    model = random_model(SMALL, seed=5, dtype=dtype)
    config = EngineConfig(1, 64, block_size=4, max_batch_size=5)
    off = generate(model, PROMPTS, 12, config, ignore_eos=True, device="cuda", eager=True)
    seen = []
    on = generate(model, PROMPTS, 12, config, ignore_eos=True, device="cuda",
                  on_step=lambda engine: seen.append(engine.backend.graphs))
    assert on.token_ids == off.token_ids
    assert seen[-1].graphs and seen[-1].num_replays > 0


@pytest.mark.gpu
def test_kv_pool_sized_from_free_memory():
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    from reference_impl.model.kv_pool import device_blocks_per_instance

    model = random_model(SMALL, seed=5).to("cuda")
    config = EngineConfig(2, 8, block_size=16)
    most, half = (device_blocks_per_instance(model, config, "cuda", f, warmup_tokens=256) for f in (0.9, 0.45))
    assert most > half > 8


def test_chunked_steps_run_eagerly_beside_static_buffer_decodes_and_are_counted():
    model = random_model(SMALL, seed=5)
    whole = generate(model, PROMPTS, 8, EngineConfig(1, 64, block_size=4, max_batch_size=5), ignore_eos=True,
                     eager=True)
    seen = []
    chunked = generate(model, PROMPTS, 8, EngineConfig(1, 64, block_size=4, max_batch_size=5,
                                                       chunked_prefill_tokens=8),
                       ignore_eos=True, eager=False, on_step=lambda engine: seen.append(engine.backend.graphs))
    assert chunked.token_ids == whole.token_ids
    assert seen[-1].num_replays > 0 and seen[-1].num_eager > 0  # decode-only steps replayed, mixed ones counted
