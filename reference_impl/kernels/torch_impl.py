"""Plain-PyTorch MicroAttention and ScaleReduce over paged KV: the path real runs take on CPU."""
import torch


def micro_attention_torch(q, k_cache, v_cache, block_table, seq_lens, scale: float):
    """Batched over sequences: KV is gathered into [num_seqs, max_len, Hkv, D] and masked past each length."""
    num_seqs, num_q_heads, head_dim = q.shape
    block_size, num_kv_heads = k_cache.shape[1], k_cache.shape[2]
    group = num_q_heads // num_kv_heads
    out = torch.zeros(num_seqs, num_q_heads, head_dim, dtype=torch.float32, device=q.device)
    lse = torch.full((num_seqs, num_q_heads), float("-inf"), dtype=torch.float32, device=q.device)
    max_len = int(seq_lens.max()) if num_seqs else 0
    if max_len == 0:
        return out.to(q.dtype), lse
    num_cols = -(-max_len // block_size)
    blocks = block_table[:, :num_cols].long().clamp(0, k_cache.shape[0] - 1)  # unused columns may be padding
    k = k_cache[blocks].reshape(num_seqs, num_cols * block_size, num_kv_heads, head_dim)[:, :max_len]
    v = v_cache[blocks].reshape(num_seqs, num_cols * block_size, num_kv_heads, head_dim)[:, :max_len]
    k = k.float().permute(0, 2, 3, 1)  # [S, Hkv, D, L]
    v = v.float().transpose(1, 2)  # [S, Hkv, L, D]
    qg = q.float().view(num_seqs, num_kv_heads, group, head_dim)
    scores = (qg @ k) * scale  # [S, Hkv, G, L]
    valid = torch.arange(max_len, device=q.device)[None, :] < seq_lens.to(q.device)[:, None].long()
    scores = scores.masked_fill(~valid[:, None, None, :], float("-inf"))
    part_lse = torch.logsumexp(scores, dim=-1)  # [S, Hkv, G]
    has_tokens = (seq_lens > 0).to(q.device)
    probs = torch.exp(scores - part_lse.masked_fill(~has_tokens[:, None, None], 0.0)[..., None])
    out = (probs @ v).reshape(num_seqs, num_q_heads, head_dim)
    lse = part_lse.reshape(num_seqs, num_q_heads)
    return out.to(q.dtype), lse


def scale_reduce_torch(outs, lses):
    """Merge partials exactly: weights exp(lse_p - lse_total); empty parts (lse = -inf) weigh zero."""
    lse = torch.logsumexp(lses, dim=0)  # [S, H]; -inf where every part is empty
    finite = torch.isfinite(lse)
    weights = torch.exp(lses - torch.where(finite, lse, torch.zeros_like(lse))[None])
    weights = torch.where(torch.isfinite(lses), weights, torch.zeros_like(weights))
    out = (weights[..., None] * outs.float()).sum(dim=0)
    return out.to(outs.dtype), lse
