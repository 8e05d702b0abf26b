"""Paged DistAttention test inputs: random block placement and random splits of each sequence into parts."""
from dataclasses import dataclass

import numpy as np
import torch

from reference_impl.kernels.reference import attention_reference

LENGTHS = (1, 15, 16, 17, 97, 1000, 4133)


@dataclass
class PagedCase:
    q: torch.Tensor  # [S, Hq, D]
    k_cache: torch.Tensor  # [num_blocks, block_size, Hkv, D]
    v_cache: torch.Tensor
    blocks: list[list[int]]  # block ids of each sequence, in token order
    seq_lens: list[int]

    @property
    def block_size(self) -> int:
        return self.k_cache.shape[1]

    def tables(self, blocks_per_seq: list[list[int]], lens: list[int]):
        """block_table [S, max_blocks] int32 padded with -1, seq_lens [S] int32."""
        width = max(1, max(len(b) for b in blocks_per_seq))
        table = torch.full((len(blocks_per_seq), width), -1, dtype=torch.int32)
        for seq, ids in enumerate(blocks_per_seq):
            table[seq, : len(ids)] = torch.tensor(ids, dtype=torch.int32)
        return table.to(self.q.device), torch.tensor(lens, dtype=torch.int32, device=self.q.device)

    def whole(self):
        return self.tables(self.blocks, self.seq_lens)

    def split(self, rng: np.random.Generator, max_parts: int = 5):
        """Cut each sequence's blocks at random into the same number of contiguous parts (some empty)."""
        num_parts = int(rng.integers(1, max_parts + 1))
        parts_blocks = [[] for _ in range(num_parts)]
        parts_lens = [[] for _ in range(num_parts)]
        for ids, length in zip(self.blocks, self.seq_lens):
            cuts = np.sort(rng.integers(0, len(ids) + 1, size=num_parts - 1))
            bounds = [0, *cuts.tolist(), len(ids)]
            for p in range(num_parts):
                lo, hi = bounds[p], bounds[p + 1]
                parts_blocks[p].append(ids[lo:hi])
                parts_lens[p].append(max(0, min(length, hi * self.block_size) - lo * self.block_size))
        return [self.tables(b, n) for b, n in zip(parts_blocks, parts_lens)]

    def reference(self, compute_dtype=torch.float32):
        table, lens = self.whole()
        return attention_reference(self.q, self.k_cache, self.v_cache, table, lens, compute_dtype=compute_dtype)


def make_case(seq_lens, num_q_heads, num_kv_heads, head_dim, block_size, dtype, seed, device="cpu") -> PagedCase:
    rng = np.random.default_rng(seed)
    gen = torch.Generator().manual_seed(seed)
    needed = [-(-n // block_size) for n in seq_lens]
    num_blocks = sum(needed) + 3  # spare blocks that no sequence uses
    perm = rng.permutation(num_blocks).tolist()
    blocks, start = [], 0
    for n in needed:
        blocks.append(perm[start:start + n])
        start += n

    def randn(*shape):
        return torch.randn(*shape, generator=gen).to(dtype).to(device)

    num_seqs = len(seq_lens)
    return PagedCase(
        q=randn(num_seqs, num_q_heads, head_dim),
        k_cache=randn(num_blocks, block_size, num_kv_heads, head_dim),
        v_cache=randn(num_blocks, block_size, num_kv_heads, head_dim),
        blocks=blocks,
        seq_lens=list(seq_lens),
    )


def assert_matches_reference(case: PagedCase, out: torch.Tensor, lse: torch.Tensor) -> None:
    """fp32: atol = rtol = 1e-5. fp16/bf16: error <= 3x the same-dtype torch reference's error + 1e-5."""
    ref_out, ref_lse = case.reference()
    assert out.dtype == case.q.dtype and lse.dtype == torch.float32
    assert not torch.isnan(out).any() and not torch.isnan(lse).any()
    torch.testing.assert_close(lse.cpu(), ref_lse.cpu(), atol=1e-5, rtol=1e-5)
    if case.q.dtype == torch.float32:
        torch.testing.assert_close(out.cpu(), ref_out.cpu(), atol=1e-5, rtol=1e-5)
        return
    same_dtype_out, _ = case.reference(compute_dtype=case.q.dtype)
    err = (out.float() - ref_out).abs().max().item()
    ref_err = (same_dtype_out.float() - ref_out).abs().max().item()
    assert err <= 3 * ref_err + 1e-5, f"{case.q.dtype}: error {err:.3g} > 3 x reference error {ref_err:.3g} + 1e-5"
