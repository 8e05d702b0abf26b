"""Tensor-parallel attention for one decode query: heads partitioned over ranks, outputs gathered.

Rank r holds heads r*H/P .. (r+1)*H/P of every token. The owner scatters the query's heads, each rank
runs `micro_attention` over all S tokens of its heads, and the owner gathers (out, lse) per head.
"""
import torch
import torch.distributed as dist

from reference_impl.kernels import micro_attention
from repro.attention.dist import OWNER, gather_partials, nbytes


def tp_attention_step(q: torch.Tensor | None, q_shard_buf: torch.Tensor, kv_paged, rank: int, world_size: int):
    """q [1, H, D] on the owner; q_shard_buf [1, H/P, D] receives this rank's heads; kv_paged: this rank's
    head shard as micro_attention arguments. Returns ((out, lse) on the owner else None, bytes sent)."""
    chunks = list(q.chunk(world_size, dim=1)) if rank == OWNER else None
    if chunks is not None:
        chunks = [c.contiguous() for c in chunks]
    dist.scatter(q_shard_buf, chunks, src=OWNER)
    out, lse = micro_attention(q_shard_buf, *kv_paged, check_ranges=False)
    parts, sent = gather_partials(out, lse, rank, world_size)
    if parts is None:
        return None, sent
    out = torch.cat([p[0] for p in parts], dim=1).to(q.dtype)
    lse = torch.cat([p[1] for p in parts], dim=1)
    return (out, lse), nbytes(q_shard_buf) * (world_size - 1)

