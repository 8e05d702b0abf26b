"""Equivalence checking for DistAttention.

Paged inputs with random block placement, random splits of each sequence into parts, and the errors
of split-then-merge against exact attention. Used by the tests and by `repro attention check`.
"""
from dataclasses import dataclass

import numpy as np
import torch

from reference_impl.kernels.api import micro_attention, scale_reduce
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


@dataclass(frozen=True, slots=True)
class Equivalence:
    """Errors of one (out, lse) against the exact fp32 reference, and the bound they must stay under."""

    out_err: float  # max |out - reference|
    lse_err: float  # max |lse - reference| over non-empty rows
    same_dtype_ref_err: float  # the same-dtype torch reference's own error (0 for fp32)
    out_bound: float
    has_nan: bool

    @property
    def ok(self) -> bool:
        return not self.has_nan and self.out_err <= self.out_bound and self.lse_err <= LSE_ATOL


LSE_ATOL = 1e-5


def equivalence(case: PagedCase, out: torch.Tensor, lse: torch.Tensor) -> Equivalence:
    """fp32: |out - ref| <= 1e-5 + 1e-5 |ref|. fp16/bf16: error <= 3x the same-dtype reference's error + 1e-5
    (flash-attn's rule). lse: within 1e-5 (+ 1e-5 relative) of the fp32 reference."""
    ref_out, ref_lse = case.reference()
    out, lse = out.float().cpu(), lse.cpu()
    ref_out, ref_lse = ref_out.cpu(), ref_lse.cpu()
    has_nan = bool(torch.isnan(out).any() or torch.isnan(lse).any())
    finite = torch.isfinite(ref_lse)
    if not torch.equal(finite, torch.isfinite(lse)):
        lse_err = float("inf")
    else:
        lse_err = ((lse - ref_lse)[finite].abs() / (1 + ref_lse[finite].abs())).max().item() if finite.any() else 0.0
    if case.q.dtype == torch.float32:
        out_err = ((out - ref_out).abs() / (1 + ref_out.abs())).max().item()
        return Equivalence(out_err, lse_err, 0.0, 1e-5, has_nan)
    same_dtype_out, _ = case.reference(compute_dtype=case.q.dtype)
    ref_err = (same_dtype_out.float().cpu() - ref_out).abs().max().item()
    out_err = (out - ref_out).abs().max().item()
    return Equivalence(out_err, lse_err, ref_err, 3 * ref_err + 1e-5, has_nan)


def assert_matches_reference(case: PagedCase, out: torch.Tensor, lse: torch.Tensor) -> None:
    assert out.dtype == case.q.dtype and lse.dtype == torch.float32
    result = equivalence(case, out, lse)
    assert result.ok, f"{case.q.dtype}: {result}"


def split_and_merge(case: PagedCase, rng: np.random.Generator, backend: str):
    """MicroAttention over each random part of every sequence, merged with ScaleReduce."""
    results = [micro_attention(case.q, case.k_cache, case.v_cache, table, lens, backend=backend)
               for table, lens in case.split(rng)]
    outs = torch.stack([o for o, _ in results])
    lses = torch.stack([lse for _, lse in results])
    return scale_reduce(outs, lses, backend=backend)
