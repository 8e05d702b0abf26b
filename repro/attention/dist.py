"""DistAttention across real processes, and the one-layer KV shards the attention micro-benchmark shares.

One decode request, one layer: q [1, H, D] on rank 0 (the owner), K and V [S, H, D] split over P ranks.
The global KV is made of P x P seeded tiles (token chunk c, head group g), each [S/P, H/P, D], so a
rank holding a token shard (DistAttention, RingAttention) and a rank holding a head shard (TP) build
the same global tensors while each generates only 1/P of them.

DistAttention step: the owner broadcasts q; each rank runs `micro_attention` over its token shard
(paged, block_size tokens a block) and the owner gathers the (out, lse) pairs and runs `scale_reduce`.
"""
from dataclasses import dataclass

import torch
import torch.distributed as dist

from reference_impl.errors import InputError
from reference_impl.kernels import micro_attention, scale_reduce

OWNER = 0


@dataclass(frozen=True, slots=True)
class AttnShape:
    context_len: int
    num_heads: int = 40  # LLaMA2-13B
    head_dim: int = 128
    world_size: int = 4
    block_size: int = 16

    def __post_init__(self):
        p = self.world_size
        if self.context_len <= 0 or self.context_len % (p * self.block_size):
            raise InputError(f"context length {self.context_len} must be a positive multiple of "
                             f"world size x block size = {p * self.block_size}")
        if self.num_heads % p:
            raise InputError(f"{self.num_heads} heads do not split over {p} ranks")

    @property
    def shard_tokens(self) -> int:
        return self.context_len // self.world_size

    @property
    def shard_heads(self) -> int:
        return self.num_heads // self.world_size


def _tile(shape: AttnShape, seed: int, c: int, g: int, dtype, device) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed * 1_000_003 + c * 1009 + g + 1)
    size = (shape.shard_tokens, shape.shard_heads, shape.head_dim)
    k = torch.randn(size, generator=gen)
    v = torch.randn(size, generator=gen)
    return k.to(device=device, dtype=dtype), v.to(device=device, dtype=dtype)


def make_query(shape: AttnShape, seed: int, dtype, device) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed * 1_000_003)
    return torch.randn(1, shape.num_heads, shape.head_dim, generator=gen).to(device=device, dtype=dtype)


def token_shard(shape: AttnShape, seed: int, rank: int, dtype, device):
    """(k, v) [S/P, H, D]: tokens rank*S/P .. (rank+1)*S/P of every head."""
    tiles = [_tile(shape, seed, rank, g, dtype, device) for g in range(shape.world_size)]
    return torch.cat([t[0] for t in tiles], dim=1), torch.cat([t[1] for t in tiles], dim=1)


def head_shard(shape: AttnShape, seed: int, rank: int, dtype, device):
    """(k, v) [S, H/P, D]: heads rank*H/P .. (rank+1)*H/P of every token."""
    tiles = [_tile(shape, seed, c, rank, dtype, device) for c in range(shape.world_size)]
    return torch.cat([t[0] for t in tiles], dim=0), torch.cat([t[1] for t in tiles], dim=0)


def full_kv(shape: AttnShape, seed: int, dtype=torch.float32, device="cpu"):
    """(k, v) [S, H, D], the global tensors (for checks on small shapes)."""
    parts = [token_shard(shape, seed, r, dtype, device) for r in range(shape.world_size)]
    return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])


def paged(k: torch.Tensor, v: torch.Tensor, block_size: int):
    """Contiguous [T, H, D] KV as micro_attention's paged arguments (T a multiple of block_size)."""
    tokens, heads, dim = k.shape
    blocks = tokens // block_size
    table = torch.arange(blocks, dtype=torch.int32, device=k.device)[None]
    lens = torch.tensor([tokens], dtype=torch.int32, device=k.device)
    return (k.view(blocks, block_size, heads, dim), v.view(blocks, block_size, heads, dim), table, lens)


def pack(out: torch.Tensor, lse: torch.Tensor) -> torch.Tensor:
    """(out [1, H, D], lse [1, H]) -> one float32 message [H, D + 1]."""
    return torch.cat([out[0].float(), lse[0, :, None]], dim=1)


def unpack(msg: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return msg[None, :, :-1], msg[None, :, -1]


def nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def gather_partials(out: torch.Tensor, lse: torch.Tensor, rank: int, world_size: int):
    """Every rank's (out, lse) as a list on the owner (None elsewhere), and the bytes this rank sent."""
    msg = pack(out, lse)
    gathered = [torch.empty_like(msg) for _ in range(world_size)] if rank == OWNER else None
    dist.gather(msg, gathered, dst=OWNER)
    if rank != OWNER:
        return None, nbytes(msg)
    return [unpack(m) for m in gathered], 0


def dist_attention_step(q_buf: torch.Tensor, kv_paged, rank: int, world_size: int):
    """One DistAttention decode step. q_buf [1, H, D] holds q on the owner (overwritten elsewhere).

    Returns ((out [1, H, D], lse [1, H]) on the owner else None, bytes this rank sent)."""
    dist.broadcast(q_buf, src=OWNER)
    out, lse = micro_attention(q_buf, *kv_paged, check_ranges=False)
    parts, sent = gather_partials(out, lse, rank, world_size)
    if parts is None:
        return None, sent
    merged = scale_reduce(torch.stack([p[0] for p in parts]), torch.stack([p[1] for p in parts]))
    return (merged[0].to(q_buf.dtype), merged[1]), nbytes(q_buf) * (world_size - 1)
