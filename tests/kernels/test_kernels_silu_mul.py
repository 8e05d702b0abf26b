"""silu_mul (SwiGLU's activation of the fused gate-up projection) on the torch path and the Triton kernel, against
silu(gate) * up computed in fp64 and rounded once, over rows, widths (one column block or several) and dtypes."""
import itertools

import pytest
import torch
import torch.nn.functional as F

from reference_impl.errors import InputError
from reference_impl.kernels import silu_mul

GRID = list(itertools.product((1, 7), (1, 40, 1030), (torch.float32, torch.float16, torch.bfloat16)))
# the torch path rounds silu(gate) to the dtype before the product: up to two roundings, the kernel one
TOLERANCE = {torch.float32: (1e-6, 1e-5), torch.float16: (1e-5, 2e-3), torch.bfloat16: (1e-5, 1.6e-2)}


def case(rows, width, dtype, device="cpu", seed=0):
    gen = torch.Generator().manual_seed(seed)
    wide = torch.randn(rows, 2 * width + 3, generator=gen) * 4
    wide[:, 0] = torch.tensor([-30.0, 30.0] * rows)[:rows]  # far tails: exp over- and underflow in the kernel
    return wide.to(dtype).to(device)[:, :2 * width]  # a view whose rows are not contiguous with each other


def reference(x):
    gate, up = x.double().chunk(2, -1)
    return (F.silu(gate) * up).to(x.dtype)


def run(backend, device, rows, width, dtype, seed):
    x = case(rows, width, dtype, device, seed)
    out = silu_mul(x, backend=backend)
    assert out.shape == (rows, width) and out.dtype == dtype
    atol, rtol = TOLERANCE[dtype]
    torch.testing.assert_close(out.cpu(), reference(x).cpu(), atol=atol, rtol=rtol)


@pytest.mark.parametrize("rows,width,dtype", GRID)
def test_torch_silu_mul_full_grid(rows, width, dtype):
    run("torch", "cpu", rows, width, dtype, GRID.index((rows, width, dtype)))


@pytest.mark.parametrize("rows,width,dtype", GRID)  # (in the interpreter on CPU: tiny shapes)
def test_triton_silu_mul_matches_reference(rows, width, dtype):
    run("triton", "cpu", rows, width, dtype, GRID.index((rows, width, dtype)))


@pytest.mark.gpu
@pytest.mark.parametrize("rows,width,dtype", GRID)
def test_triton_silu_mul_gpu_full_grid(rows, width, dtype):
    run("triton", "cuda", rows, width, dtype, GRID.index((rows, width, dtype)))


def test_the_torch_path_is_hugging_faces_act_fn_times_up():
    x = case(5, 40, torch.float16)
    gate, up = x.chunk(2, -1)
    assert torch.equal(silu_mul(x, backend="torch"), F.silu(gate) * up)


def test_bad_shapes_are_one_clear_error():
    with pytest.raises(InputError, match="silu_mul"):
        silu_mul(torch.zeros(3, 5))


def test_the_decoder_with_the_kernel_gives_the_torch_paths_states():
    from reference_impl.model.llama import ModelConfig, random_model
    from reference_impl.model.prompt_attention import causal_attention

    config = ModelConfig(vocab_size=64, hidden_size=32, intermediate_size=72, num_layers=2, num_heads=4, num_kv_heads=2)
    model = random_model(config, seed=3)
    ids = torch.tensor([5, 9, 2, 33, 7])
    states = {b: model.with_silu_mul(b).forward(ids, torch.arange(5), lambda layer, q, k, v: causal_attention(q, k, v))
              for b in ("torch", "triton")}
    assert model.silu_mul_backend == "auto"  # the variants share the weights and leave the model as it was
    torch.testing.assert_close(states["triton"], states["torch"], atol=1e-5, rtol=1e-5)
