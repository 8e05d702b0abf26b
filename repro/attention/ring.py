"""RingAttention for one decode query: KV shards travel round the ring to the rank holding the query.

Rank r starts with token shard r. In each of P - 1 hops every rank passes the K/V shard it holds to
rank r - 1 and receives the one of rank r + 1 (send and receive overlap the owner's compute on the
shard it already has), so the owner sees every shard and merges the partials online with ScaleReduce.
"""
import torch
import torch.distributed as dist

from reference_impl.kernels import micro_attention, scale_reduce
from repro.attention.dist import OWNER, nbytes, paged


def _merge(acc, part):
    if acc is None:
        return part
    return scale_reduce(torch.stack([acc[0], part[0]]), torch.stack([acc[1], part[1]]))


def ring_attention_step(q: torch.Tensor | None, k: torch.Tensor, v: torch.Tensor, rank: int, world_size: int,
                        block_size: int, buffers=None):
    """q [1, H, D] on the owner (None elsewhere); k, v [S/P, H, D] this rank's token shard.

    `buffers`: two spare (k, v) pairs shaped like the shard, reused across steps.
    Returns ((out, lse) on the owner else None, bytes this rank sent)."""
    if buffers is None:
        buffers = [(torch.empty_like(k), torch.empty_like(v)) for _ in range(2)]
    send_to, recv_from = (rank - 1) % world_size, (rank + 1) % world_size
    held = (k, v)
    acc = None
    sent = 0
    for hop in range(world_size):
        pending = []
        if hop < world_size - 1:
            recv = buffers[hop % 2]
            ops = [dist.P2POp(dist.isend, held[0], send_to), dist.P2POp(dist.isend, held[1], send_to),
                   dist.P2POp(dist.irecv, recv[0], recv_from), dist.P2POp(dist.irecv, recv[1], recv_from)]
            pending = dist.batch_isend_irecv(ops)
            sent += nbytes(held[0]) + nbytes(held[1])
        if rank == OWNER:
            out, lse = micro_attention(q, *paged(held[0], held[1], block_size), check_ranges=False)
            acc = _merge(acc, (out, lse))
        for req in pending:
            req.wait()
        if hop < world_size - 1:
            held = recv
    return acc, sent
