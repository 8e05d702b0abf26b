"""Shape, dtype and range checks shared by every kernel backend: bad input is one ValueError line."""
import torch

from reference_impl.errors import InputError

SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _need(cond: bool, message: str) -> None:
    if not cond:
        raise InputError(message)


def check_micro_attention_inputs(q, k_cache, v_cache, block_table, seq_lens, *, check_ranges: bool = True):
    """Validate `micro_attention` arguments; returns (num_q_heads // num_kv_heads) as the group size."""
    for name, t in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache),
                    ("block_table", block_table), ("seq_lens", seq_lens)):
        _need(isinstance(t, torch.Tensor), f"{name} must be a torch.Tensor, got {type(t).__name__}")
    _need(q.dim() == 3, f"q must be [num_seqs, num_q_heads, head_dim], got shape {tuple(q.shape)}")
    _need(k_cache.dim() == 4,
          f"k_cache must be [num_blocks, block_size, num_kv_heads, head_dim], got shape {tuple(k_cache.shape)}")
    _need(v_cache.shape == k_cache.shape,
          f"v_cache shape {tuple(v_cache.shape)} must equal k_cache shape {tuple(k_cache.shape)}")
    _need(q.dtype in SUPPORTED_DTYPES, f"q dtype {q.dtype} is not supported; use float32, float16 or bfloat16")
    _need(k_cache.dtype == q.dtype and v_cache.dtype == q.dtype,
          f"k_cache/v_cache dtype ({k_cache.dtype}, {v_cache.dtype}) must match q dtype {q.dtype}")
    num_seqs, num_q_heads, head_dim = q.shape
    _, _, num_kv_heads, kv_head_dim = k_cache.shape
    _need(kv_head_dim == head_dim, f"head_dim of q ({head_dim}) and of the KV cache ({kv_head_dim}) differ")
    _need(num_kv_heads > 0 and num_q_heads % num_kv_heads == 0,
          f"num_q_heads ({num_q_heads}) must be a multiple of num_kv_heads ({num_kv_heads})")
    _need(k_cache.shape[1] > 0, "block_size must be positive")
    _need(block_table.dim() == 2 and block_table.shape[0] == num_seqs,
          f"block_table must be [num_seqs={num_seqs}, max_blocks_per_seq], got shape {tuple(block_table.shape)}")
    _need(seq_lens.dim() == 1 and seq_lens.shape[0] == num_seqs,
          f"seq_lens must be [num_seqs={num_seqs}], got shape {tuple(seq_lens.shape)}")
    _need(not block_table.is_floating_point() and not seq_lens.is_floating_point(),
          "block_table and seq_lens must be integer tensors (int32)")
    devices = {t.device for t in (q, k_cache, v_cache, block_table, seq_lens)}
    _need(len(devices) == 1, f"all inputs must be on one device, got {sorted(map(str, devices))}")
    if check_ranges:
        check_block_ranges(block_table, seq_lens, num_blocks=k_cache.shape[0], block_size=k_cache.shape[1])
    return num_q_heads // num_kv_heads


def check_block_ranges(block_table, seq_lens, *, num_blocks: int, block_size: int) -> None:
    """Every seq length fits its block table row and every referenced block id is in [0, num_blocks)."""
    if seq_lens.numel() == 0:
        return
    max_tokens = block_table.shape[1] * block_size
    lo, hi = int(seq_lens.min()), int(seq_lens.max())
    _need(lo >= 0, f"seq_lens must be >= 0, got {lo}")
    _need(hi <= max_tokens,
          f"a seq length ({hi}) exceeds its block table ({block_table.shape[1]} blocks x {block_size} tokens)")
    used_blocks = (seq_lens.to(torch.int64) + block_size - 1) // block_size
    cols = torch.arange(block_table.shape[1], device=block_table.device)
    used = cols[None, :] < used_blocks[:, None]
    bad = used & ((block_table < 0) | (block_table >= num_blocks))
    if bool(bad.any()):
        seq, col = (int(i) for i in bad.nonzero()[0])
        raise InputError(f"block id {int(block_table[seq, col])} of seq {seq} is outside [0, {num_blocks})")


def check_scale_reduce_inputs(outs, lses) -> None:
    _need(isinstance(outs, torch.Tensor) and isinstance(lses, torch.Tensor), "outs and lses must be tensors")
    _need(outs.dim() == 4, f"outs must be [num_parts, num_seqs, num_heads, head_dim], got {tuple(outs.shape)}")
    _need(lses.dim() == 3 and tuple(lses.shape) == tuple(outs.shape[:3]),
          f"lses must be [num_parts, num_seqs, num_heads] = {tuple(outs.shape[:3])}, got {tuple(lses.shape)}")
    _need(outs.shape[0] >= 1, "scale_reduce needs at least one part")
    _need(outs.dtype in SUPPORTED_DTYPES, f"outs dtype {outs.dtype} is not supported")
    _need(lses.dtype == torch.float32, f"lses must be float32, got {lses.dtype}")
    _need(outs.device == lses.device, f"outs ({outs.device}) and lses ({lses.device}) are on different devices")


def resolve_scale(scale, head_dim: int) -> float:
    if scale is None:
        return head_dim ** -0.5
    scale = float(scale)
    _need(scale > 0 and scale != float("inf"), f"scale must be a positive finite number, got {scale}")
    return scale
