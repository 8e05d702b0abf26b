"""Split each request's blocks into 1-5 parts, MicroAttention per part, ScaleReduce, compare to exact fp32."""
import itertools

import numpy as np
import pytest
import torch

from reference_impl.kernels.equivalence import LENGTHS, assert_matches_reference, make_case, split_and_merge

NUM_SEQS = (1, 3, 17)
HEADS = ((4, 4), (8, 2), (8, 1))
HEAD_DIMS = (64, 80, 128)
BLOCK_SIZES = (8, 16)
DTYPES = (torch.float32, torch.float16, torch.bfloat16)

FULL_GRID = list(itertools.product(NUM_SEQS, HEADS, HEAD_DIMS, BLOCK_SIZES, DTYPES))


def lengths_for(num_seqs: int, offset: int) -> list[int]:
    """Cycle through LENGTHS so every length shows up; the 4133-token one at most once per batch."""
    lens = [LENGTHS[(offset + i) % len(LENGTHS)] for i in range(num_seqs)]
    seen_long = False
    for i, n in enumerate(lens):
        if n == LENGTHS[-1]:
            lens[i] = n if not seen_long else 97
            seen_long = True
    return lens


@pytest.mark.parametrize("num_seqs,heads,head_dim,block_size,dtype", FULL_GRID)
def test_torch_path_full_grid(num_seqs, heads, head_dim, block_size, dtype):
    index = FULL_GRID.index((num_seqs, heads, head_dim, block_size, dtype))
    case = make_case(lengths_for(num_seqs, index), *heads, head_dim, block_size, dtype, seed=index)
    assert_matches_reference(case, *split_and_merge(case, np.random.default_rng(index), backend="torch"))


# Under the interpreter every inner-loop step costs milliseconds, so the Triton grid covers every value
# of every axis (and every length) in a few cases instead of the full product.
TRITON_CASES = [
    # (lengths, heads, head_dim, block_size, dtype)
    ([1, 15, 16], (4, 4), 64, 8, torch.float32),
    ([17, 97, 1], (8, 2), 80, 16, torch.float16),
    ([97], (8, 1), 128, 8, torch.bfloat16),
    ([4133], (8, 1), 64, 16, torch.float32),
    ([1000], (8, 2), 128, 16, torch.bfloat16),
    ([LENGTHS[i % 7] if LENGTHS[i % 7] < 1000 else 33 for i in range(17)], (4, 4), 80, 8, torch.float32),
    ([15, 1000, 16], (8, 1), 80, 8, torch.float16),
    ([16, 1, 17], (4, 4), 128, 16, torch.float16),
    ([97, 17, 15], (8, 2), 64, 8, torch.bfloat16),
    # beyond the grid: the other supported head_dim and block size
    ([33, 1, 64], (8, 2), 96, 32, torch.float32),
    ([200, 31], (4, 1), 96, 32, torch.bfloat16),
]


@pytest.mark.parametrize("case_index", range(len(TRITON_CASES)))
def test_triton_kernels_match_reference(case_index):
    lens, heads, head_dim, block_size, dtype = TRITON_CASES[case_index]
    case = make_case(lens, *heads, head_dim, block_size, dtype, seed=100 + case_index)
    assert_matches_reference(case, *split_and_merge(case, np.random.default_rng(case_index), backend="triton"))


@pytest.mark.gpu
@pytest.mark.parametrize("num_seqs,heads,head_dim,block_size,dtype", FULL_GRID)
def test_triton_gpu_full_grid(num_seqs, heads, head_dim, block_size, dtype):
    index = FULL_GRID.index((num_seqs, heads, head_dim, block_size, dtype))
    case = make_case(lengths_for(num_seqs, index), *heads, head_dim, block_size, dtype, seed=index, device="cuda")
    assert_matches_reference(case, *split_and_merge(case, np.random.default_rng(index), backend="triton"))
