"""Plain-PyTorch references: gather each sequence's KV into a contiguous tensor, then softmax(q k^T * scale) v."""
import torch


def gather_kv(k_cache, v_cache, block_table, seq_lens):
    """Contiguous KV per sequence: a list of ([len, num_kv_heads, D], [len, num_kv_heads, D])."""
    block_size = k_cache.shape[1]
    pairs = []
    for seq, length in enumerate(seq_lens.tolist()):
        blocks = block_table[seq, : -(-length // block_size)].long()
        k = k_cache[blocks].reshape(-1, *k_cache.shape[2:])[:length]
        v = v_cache[blocks].reshape(-1, *v_cache.shape[2:])[:length]
        pairs.append((k, v))
    return pairs


def attention_reference(q, k_cache, v_cache, block_table, seq_lens, *, scale=None, compute_dtype=torch.float32):
    """Exact decode attention of q over each sequence's paged KV.

    q [num_seqs, Hq, D]; returns (out [num_seqs, Hq, D] in compute_dtype, lse [num_seqs, Hq] float32).
    With compute_dtype=q.dtype it is the same-dtype reference of the tolerance rule.
    """
    num_seqs, num_q_heads, head_dim = q.shape
    group = num_q_heads // k_cache.shape[2]
    scale = head_dim ** -0.5 if scale is None else scale
    out = torch.zeros(num_seqs, num_q_heads, head_dim, dtype=compute_dtype, device=q.device)
    lse = torch.full((num_seqs, num_q_heads), float("-inf"), dtype=torch.float32, device=q.device)
    for seq, (k, v) in enumerate(gather_kv(k_cache, v_cache, block_table, seq_lens)):
        if k.shape[0] == 0:
            continue
        k = k.to(compute_dtype).repeat_interleave(group, dim=1).transpose(0, 1)  # [Hq, len, D]
        v = v.to(compute_dtype).repeat_interleave(group, dim=1).transpose(0, 1)
        scores = (q[seq].to(compute_dtype)[:, None, :] @ k.transpose(1, 2))[:, 0, :] * scale  # [Hq, len]
        lse[seq] = torch.logsumexp(scores.float(), dim=-1)
        out[seq] = (torch.softmax(scores, dim=-1)[:, None, :] @ v)[:, 0, :]
    return out, lse
