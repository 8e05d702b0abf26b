"""Measure DistAttention, RingAttention and TP attention of one decode query on P real processes.

Every rank builds its shards from the same seeded tiles, runs each method `iters` times (after one
warm-up) between barriers, and the owner reports the median wall time, the bytes sent by all ranks in
one step, and the largest difference between the three outputs.
"""
import statistics
import time

import torch
import torch.distributed as dist

from repro.attention.dist import (
    OWNER, AttnShape, dist_attention_step, head_shard, make_query, paged, token_shard,
)
from repro.attention.ranks import run_ranks
from repro.attention.ring import ring_attention_step
from repro.attention.tp import tp_attention_step

METHODS = ("DistAttention", "RingAttention", "TP")


def _timed(step, iters: int, device):
    times, result, sent = [], None, 0
    for i in range(iters + 1):
        dist.barrier()
        t0 = time.perf_counter()
        result, sent = step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        if i:
            times.append(time.perf_counter() - t0)
    total = torch.tensor([float(sent)])
    dist.all_reduce(total)
    return result, statistics.median(times), int(total.item())


def _bench_rank(rank, world_size, device, shape_args, seed, iters):
    shape = AttnShape(*shape_args, world_size=world_size)
    dtype = torch.float16 if device.type == "cuda" else torch.float32
    q = make_query(shape, seed, dtype, device)
    q_buf = q.clone() if rank == OWNER else torch.empty_like(q)
    k_tok, v_tok = token_shard(shape, seed, rank, dtype, device)
    tok_paged = paged(k_tok, v_tok, shape.block_size)
    ring_buffers = [(torch.empty_like(k_tok), torch.empty_like(v_tok)) for _ in range(2)]
    rows, outputs = [], {}
    steps = {
        "DistAttention": lambda: dist_attention_step(q_buf, tok_paged, rank, world_size),
        "RingAttention": lambda: ring_attention_step(q if rank == OWNER else None, k_tok, v_tok, rank, world_size,
                                                     shape.block_size, ring_buffers),
    }
    for name, step in steps.items():
        outputs[name], median_s, sent = _timed(step, iters, device)
        rows.append({"method": name, "time_ms": median_s * 1e3, "bytes_per_step": sent})
    del tok_paged, k_tok, v_tok, ring_buffers
    k_head, v_head = head_shard(shape, seed, rank, dtype, device)
    head_paged = paged(k_head, v_head, shape.block_size)
    q_shard = torch.empty(1, shape.shard_heads, shape.head_dim, dtype=dtype, device=device)
    outputs["TP"], median_s, sent = _timed(
        lambda: tp_attention_step(q if rank == OWNER else None, q_shard, head_paged, rank, world_size), iters, device)
    rows.append({"method": "TP", "time_ms": median_s * 1e3, "bytes_per_step": sent})
    if rank != OWNER:
        return None
    ref_out, ref_lse = outputs["DistAttention"]
    max_diff = max(float((outputs[m][0].float() - ref_out.float()).abs().max()) for m in METHODS[1:])
    max_lse_diff = max(float((outputs[m][1] - ref_lse).abs().max()) for m in METHODS[1:])
    return {"rows": rows, "max_abs_diff": max_diff, "max_lse_diff": max_lse_diff,
            "out": ref_out.float().cpu(), "lse": ref_lse.cpu(), "dtype": str(dtype).removeprefix("torch.")}


def measure(context_len: int, *, world_size: int = 4, num_heads: int = 40, head_dim: int = 128, seed: int = 0,
            iters: int = 3, backend: str | None = None) -> dict:
    """One context length: {"rows": [{method, time_ms, bytes_per_step}], "max_abs_diff", "max_lse_diff", ...}."""
    AttnShape(context_len, num_heads, head_dim, world_size)  # bad input fails here, before spawning
    return run_ranks(_bench_rank, world_size, (context_len, num_heads, head_dim), seed, iters, backend=backend)
