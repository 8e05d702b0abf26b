"""Public kernel API: MicroAttention, ScaleReduce and their composition (DistAttention), the K/V store and the
MLP's SiLU-mul, on any backend."""
import torch

from reference_impl.kernels.backend import resolve_backend
from reference_impl.kernels.torch_impl import micro_attention_torch, scale_reduce_torch, silu_mul_torch, store_kv_torch
from reference_impl.kernels.triton_launch import (
    micro_attention_triton, scale_reduce_triton, silu_mul_triton, store_kv_triton,
)
from reference_impl.kernels.validate import (
    check_micro_attention_inputs, check_scale_reduce_inputs, resolve_scale,
)
from reference_impl.errors import InputError


def micro_attention(q, k_cache, v_cache, block_table, seq_lens, *, scale=None, backend="auto",
                    check_ranges=True):
    """MicroAttention (MA): decode attention of each query over one partial KV held in paged rBlocks.

    q           [num_seqs, num_q_heads, head_dim]                 float32 | float16 | bfloat16
    k_cache     [num_blocks, block_size, num_kv_heads, head_dim]  same dtype (v_cache the same shape)
    block_table [num_seqs, max_blocks_per_seq] int32: block ids of this partial KV, in token order
    seq_lens    [num_seqs] int32: tokens of this partial KV per sequence (0 allowed)
    scale       default 1/sqrt(head_dim)

    Returns (out [num_seqs, num_q_heads, head_dim] in q.dtype, lse [num_seqs, num_q_heads] float32).
    `out` is softmax-normalised over this partial and `lse` is the natural-log log-sum-exp of the scaled
    scores. In the paper's terms (infinite-llm Eq. 2) m_j = max score, e_j = sum exp(score - m_j),
    MA_j = out * e_j, and lse = m_j + log(e_j). A sequence with 0 tokens gives out = 0 and lse = -inf.
    num_q_heads must be a multiple of num_kv_heads (MHA, GQA, MQA). `check_ranges=False` skips the
    block-id and length checks, which read the tables back to the host.
    """
    check_micro_attention_inputs(q, k_cache, v_cache, block_table, seq_lens, check_ranges=check_ranges)
    scale = resolve_scale(scale, q.shape[-1])
    if resolve_backend(backend, q.device) == "triton":
        return micro_attention_triton(q, k_cache, v_cache, block_table, seq_lens, scale)
    return micro_attention_torch(q, k_cache, v_cache, block_table, seq_lens, scale)


def store_kv(k, v, k_cache, v_cache, slots, *, backend="auto", has_padding=True):
    """Store this step's K/V rows in place in paged caches (no gather or copy of blocks).

    k, v      [num_tokens, num_kv_heads, head_dim]
    k_cache   [num_blocks, block_size, num_kv_heads, head_dim] (v_cache the same shape), written in place
    slots     [num_tokens] int: block * block_size + offset of each token; a negative slot is skipped (padding)
    K/V are cast to the cache's dtype. `has_padding=False` promises no negative slot (the torch path then skips
    looking for them).
    """
    if k.shape != v.shape or k.dim() != 3 or k_cache.shape != v_cache.shape or k_cache.dim() != 4:
        raise InputError(f"store_kv: k/v must be [T, Hkv, D] and the caches [blocks, block_size, Hkv, D], got "
                         f"{tuple(k.shape)}, {tuple(v.shape)}, {tuple(k_cache.shape)}, {tuple(v_cache.shape)}")
    if k.shape[1:] != k_cache.shape[2:] or slots.shape != k.shape[:1] or slots.is_floating_point():
        raise InputError(f"store_kv: rows {tuple(k.shape[1:])} must match the cache's {tuple(k_cache.shape[2:])} "
                         f"and slots must be [{k.shape[0]}] integers, got {tuple(slots.shape)} {slots.dtype}")
    if resolve_backend(backend, k.device) == "triton":
        return store_kv_triton(k, v, k_cache, v_cache, slots)
    return store_kv_torch(k, v, k_cache, v_cache, slots, has_padding)


def silu_mul(x, *, backend="auto"):
    """SwiGLU's activation of the fused gate-up projection: x [T, 2I] (gate in the first I columns, up in the
    last) -> silu(gate) * up [T, I] in x.dtype. Triton reads x once and writes the result once (math in fp32);
    torch runs silu, then the product, each in x.dtype."""
    if x.dim() != 2 or x.shape[1] % 2 or not x.is_floating_point():
        raise InputError(f"silu_mul: x must be a float [T, 2I] tensor, got {tuple(x.shape)} {x.dtype}")
    if resolve_backend(backend, x.device) == "triton":
        return silu_mul_triton(x)
    return silu_mul_torch(x)


def scale_reduce(outs, lses, *, backend="auto"):
    """ScaleReduce: merge partial attention results exactly (infinite-llm Eq. 3).

    outs [num_parts, num_seqs, num_heads, head_dim], lses [num_parts, num_seqs, num_heads] float32.
    Returns (out [num_seqs, num_heads, head_dim] in outs.dtype, lse [num_seqs, num_heads] float32).
    Each part is weighted by exp(lse_p - lse) with lse = logsumexp over parts; an empty part
    (lse = -inf) contributes nothing, and all-empty parts give out = 0 and lse = -inf.
    """
    check_scale_reduce_inputs(outs, lses)
    if resolve_backend(backend, outs.device) == "triton":
        return scale_reduce_triton(outs, lses)
    return scale_reduce_torch(outs, lses)


def dist_attention(q, parts, *, scale=None, backend="auto"):
    """DistAttention: MicroAttention over each partial KV, merged with ScaleReduce.

    q [num_seqs, num_q_heads, head_dim]; parts is a non-empty list of
    (k_cache, v_cache, block_table, seq_lens) as for `micro_attention`. Returns (out, lse).
    """
    if not parts:
        raise InputError("dist_attention needs at least one part (k_cache, v_cache, block_table, seq_lens)")
    results = [micro_attention(q, *part, scale=scale, backend=backend) for part in parts]
    if len(results) == 1:
        return results[0]
    outs = torch.stack([out for out, _ in results])
    lses = torch.stack([lse for _, lse in results])
    return scale_reduce(outs, lses, backend=backend)
