"""Host wrappers that size the grids and launch the Triton kernels (inputs are validated by the caller)."""
import torch

from reference_impl.kernels.backend import is_interpreted, load_triton
from reference_impl.kernels.launch_config import CONFIGS, KernelConfig, context_class, plan_splits


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _next_pow2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


def _num_sms(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 1


def micro_attention_triton(q, k_cache, v_cache, block_table, seq_lens, scale: float,
                           config: KernelConfig | None = None, tokens_per_split: int | None = None):
    """Returns (out [S, Hq, D] q.dtype, lse [S, Hq] fp32); splits of one sequence are merged in-call."""
    kernels = load_triton()
    num_seqs, num_q_heads, head_dim = q.shape
    block_size, num_kv_heads = k_cache.shape[1], k_cache.shape[2]
    group = num_q_heads // num_kv_heads
    max_tokens = block_table.shape[1] * block_size
    cfg = config or CONFIGS[context_class(max_tokens)]
    if tokens_per_split is None:
        tokens_per_split = plan_splits(max_tokens, num_seqs * num_kv_heads, _num_sms(q.device), cfg)
    num_splits = max(1, _cdiv(max_tokens, tokens_per_split))
    q = q.contiguous() if q.stride(-1) != 1 else q
    block_table = block_table.to(torch.int32).contiguous()
    seq_lens = seq_lens.to(torch.int32).contiguous()
    part_out = torch.empty(num_splits, num_seqs, num_q_heads, head_dim, dtype=torch.float32, device=q.device)
    part_lse = torch.empty(num_splits, num_seqs, num_q_heads, dtype=torch.float32, device=q.device)
    if num_seqs == 0:
        return part_out[0].to(q.dtype), part_lse[0]
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache)):
        if t.stride(-1) != 1:
            raise ValueError(f"{name} must have a contiguous head_dim")
    compute_fp32 = q.dtype == torch.float32 or is_interpreted()
    kernels.micro_attention_kernel[(num_seqs, num_kv_heads, num_splits)](
        q, k_cache, v_cache, block_table, seq_lens, part_out, part_lse,
        scale,
        q.stride(0), q.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2),
        block_table.stride(0),
        part_out.stride(0), part_out.stride(1), part_out.stride(2),
        part_lse.stride(0), part_lse.stride(1),
        GROUP=group, GROUP_PAD=max(16, _next_pow2(group)),
        HEAD_DIM=head_dim, D_PAD=max(16, _next_pow2(head_dim)),
        BLOCK_SIZE=block_size, TILE_N=cfg.tile_n, TOKENS_PER_SPLIT=tokens_per_split,
        COMPUTE_FP32=compute_fp32, DOT_PRECISION="ieee" if q.dtype == torch.float32 else "tf32",
        num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )
    if num_splits == 1:
        return part_out[0].to(q.dtype), part_lse[0]
    return scale_reduce_triton(part_out, part_lse, out_dtype=q.dtype)


def scale_reduce_triton(outs, lses, out_dtype=None):
    """outs [P, S, H, D], lses [P, S, H] fp32 -> (out [S, H, D] in out_dtype or outs.dtype, lse [S, H])."""
    kernels = load_triton()
    num_parts, num_seqs, num_heads, head_dim = outs.shape
    if outs.stride(-1) != 1:
        outs = outs.contiguous()
    out = torch.empty(num_seqs, num_heads, head_dim, dtype=torch.float32, device=outs.device)
    lse = torch.empty(num_seqs, num_heads, dtype=torch.float32, device=outs.device)
    if num_seqs and num_heads:
        kernels.scale_reduce_kernel[(num_seqs, num_heads)](
            outs, lses, out, lse, num_parts,
            outs.stride(0), outs.stride(1), outs.stride(2),
            lses.stride(0), lses.stride(1),
            out.stride(0), out.stride(1), lse.stride(0),
            HEAD_DIM=head_dim, D_PAD=max(16, _next_pow2(head_dim)),
            PARTS_PAD=max(2, _next_pow2(num_parts)),
        )
    return out.to(out_dtype or outs.dtype), lse


def _rows(t):
    """t [T, H, D] as [T, H * D] rows with unit stride inside a row (a view when it can be)."""
    if t.stride(2) != 1 or t.stride(1) != t.shape[2]:
        t = t.contiguous()
    return t


def store_kv_triton(k, v, k_cache, v_cache, slots):
    """k/v [T, Hkv, D] into k_cache/v_cache [num_blocks, block_size, Hkv, D] at flat slots [T] (-1: skipped)."""
    kernels = load_triton()
    k, v = _rows(k), _rows(v)
    row = k.shape[1] * k.shape[2]
    if k.shape[0]:
        kernels.store_kv_kernel[(k.shape[0],)](
            k, v, k_cache, v_cache, slots.contiguous(),
            k.stride(0), v.stride(0), k_cache.stride(1), v_cache.stride(1),
            ROW=row, ROW_PAD=max(16, _next_pow2(row)),
        )


def silu_mul_triton(x):
    """x [T, 2I] (gate, then up) -> silu(gate) * up [T, I] in x.dtype, in one pass over x."""
    kernels = load_triton()
    if x.stride(-1) != 1:
        x = x.contiguous()
    width = x.shape[1] // 2
    out = torch.empty(x.shape[0], width, dtype=x.dtype, device=x.device)
    block = min(1024, _next_pow2(width))
    if x.shape[0] and width:
        kernels.silu_mul_kernel[(x.shape[0], _cdiv(width, block))](x, out, width, x.stride(0), out.stride(0),
                                                                   BLOCK=block)
    return out
