"""store_kv writes each token's K/V row at its slot and nothing else, on the torch path and the Triton kernel,
against a plain per-token loop."""
import itertools

import pytest
import torch

from reference_impl.errors import InputError
from reference_impl.kernels import store_kv

GRID = list(itertools.product((1, 7), ((2, 64), (1, 80), (4, 128)), (8, 16), (torch.float32, torch.float16, torch.bfloat16)))


def case(num_tokens, heads, block_size, dtype, device="cpu", seed=0):
    hkv, d = heads
    gen = torch.Generator().manual_seed(seed)
    # K/V as a slice of a wider projection (the fused QKV output): rows not contiguous across tokens
    qkv = torch.randn(num_tokens, hkv + 2 * hkv + 3, d, generator=gen).to(device)
    k, v = qkv[:, 1:1 + hkv].to(dtype), qkv[:, 1 + hkv:1 + 2 * hkv]  # v stays fp32: cast on store
    caches = [torch.randn(5, block_size, hkv, d, generator=gen).to(dtype).to(device) for _ in range(2)]
    slots = torch.randperm(5 * block_size, generator=gen)[:num_tokens].to(device)
    if num_tokens > 1:
        slots[-1] = -1  # padding
    return k, v, caches, slots


def reference(k, v, caches, slots):
    out = [c.clone() for c in caches]
    for t, s in enumerate(slots.tolist()):
        if s >= 0:
            for c, x in zip(out, (k, v)):
                c.view(-1, *c.shape[2:])[s] = x[t].to(c.dtype)
    return out


def run(backend, device, num_tokens, heads, block_size, dtype, seed):
    k, v, caches, slots = case(num_tokens, heads, block_size, dtype, device, seed)
    expected = reference(k, v, caches, slots)
    store_kv(k, v, *caches, slots, backend=backend)
    assert torch.equal(caches[0], expected[0])  # K: same dtype, copied bit for bit
    torch.testing.assert_close(caches[1], expected[1])  # V: cast from fp32 (the interpreter may round differently)


@pytest.mark.parametrize("num_tokens,heads,block_size,dtype", GRID)
def test_torch_store_full_grid(num_tokens, heads, block_size, dtype):
    run("torch", "cpu", num_tokens, heads, block_size, dtype, GRID.index((num_tokens, heads, block_size, dtype)))


@pytest.mark.parametrize("index", [0, 21, 35])  # the interpreter is slow: a few cases covering every axis value
def test_triton_store_matches_reference(index):
    run("triton", "cpu", *GRID[index], index)


@pytest.mark.gpu
@pytest.mark.parametrize("num_tokens,heads,block_size,dtype", GRID)
def test_triton_store_gpu_full_grid(num_tokens, heads, block_size, dtype):
    run("triton", "cuda", num_tokens, heads, block_size, dtype, GRID.index((num_tokens, heads, block_size, dtype)))


def test_bad_shapes_are_one_clear_error():
    k, v, caches, slots = case(3, (2, 64), 8, torch.float32)
    with pytest.raises(InputError, match="store_kv"):
        store_kv(k, v, *caches, slots[:2])
