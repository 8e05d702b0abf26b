"""Causal attention of whole prompts over their own K/V: one prompt by torch SDPA (flash or memory-efficient on
CUDA), several prompts of one prefill step packed in one call with no attention across prompts.

On CUDA (fp16/bf16, head_dim a multiple of 8 up to 256, compute capability 8.0 or more) torch's `varlen_attn`
(FlashAttention over the packed rows, `cu_seqlens` int32 marking where each prompt starts) runs all the step's
prompts at once. Elsewhere, and as the reference, each prompt runs its own causal SDPA: on CPU that loop was
measured faster than one SDPA with a block-diagonal causal mask (3x slower at 4 x 64 tokens, 47x at 64 x 64) and
than a padded batch (up to 2.5x slower for uneven lengths), and no slower for two or three short prompts.
"""
import functools

import torch
import torch.nn.functional as F

FLASH_DTYPES = (torch.float16, torch.bfloat16)


@functools.cache
def _varlen():
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:  # torch before 2.10
        return None
    return varlen_attn


@functools.cache
def _capability(device: torch.device) -> tuple[int, int]:
    return torch.cuda.get_device_capability(device)


def causal_attention(q, k, v):
    """One whole prompt: q [T, Hq, D], k/v [T, Hkv, D] -> [T, Hq, D] by torch SDPA (causal, GQA)."""
    out = F.scaled_dot_product_attention(q.transpose(0, 1)[None], k.transpose(0, 1)[None], v.transpose(0, 1)[None],
                                         is_causal=True, enable_gqa=q.shape[1] != k.shape[1])
    return out[0].transpose(0, 1)


def varlen_fits(q) -> bool:
    """Whether `varlen_attn` can run these queries [T, Hq, D]."""
    d = q.shape[-1]
    return (q.is_cuda and q.dtype in FLASH_DTYPES and d % 8 == 0 and d <= 256 and _varlen() is not None
            and _capability(q.device) >= (8, 0))


def packed_causal_attention(q, k, v, cu_seqlens, max_len: int):
    """Prompts packed in rows: q [T, Hq, D], k/v [T, Hkv, D], prompt i in rows cu_seqlens[i]:cu_seqlens[i + 1]
    (int32 on the device) -> [T, Hq, D], causal within each prompt. Needs `varlen_fits(q)`."""
    return _varlen()(q, k, v, cu_seqlens, cu_seqlens, max_len, max_len, window_size=(-1, 0),
                     enable_gqa=q.shape[1] != k.shape[1])

