"""Plain-PyTorch MicroAttention and ScaleReduce over paged KV, the K/V store and SiLU-mul: the path real runs take
on CPU.

MicroAttention walks the KV in chunks of a few MiB that reuse the same gather buffers: fresh large
allocations on CPU cost page faults that take longer than the attention itself. Chunks are merged
with ScaleReduce, so a chunk is just one more partial.
"""
import torch
import torch.nn.functional as F

WORKSPACE_BYTES = 4 * 2**20  # fp32 K (and V) working set of one chunk


def scale_reduce_torch(outs, lses):
    """Merge partials exactly: weights exp(lse_p - lse_total); empty parts (lse = -inf) weigh zero."""
    lse = torch.logsumexp(lses, dim=0)  # [S, H]; -inf where every part is empty
    finite = torch.isfinite(lse)
    weights = torch.exp(lses - torch.where(finite, lse, torch.zeros_like(lse))[None])
    weights = torch.where(torch.isfinite(lses), weights, torch.zeros_like(weights))
    out = (weights[..., None] * outs.float()).sum(dim=0)
    return out.to(outs.dtype), lse


def _chunk_shape(num_seqs: int, max_len: int, block_size: int, row_bytes: int) -> tuple[int, int]:
    """(sequences, blocks) per chunk so that one chunk's fp32 K is about WORKSPACE_BYTES."""
    block_bytes = block_size * row_bytes
    seqs = max(1, min(num_seqs, WORKSPACE_BYTES // block_bytes))
    blocks = max(1, min(-(-max_len // block_size), WORKSPACE_BYTES // (seqs * block_bytes)))
    return seqs, blocks


def micro_attention_torch(q, k_cache, v_cache, block_table, seq_lens, scale: float):
    """Same contract as `micro_attention`; computes in fp32 whatever the input dtype."""
    num_seqs, num_q_heads, head_dim = q.shape
    num_blocks, block_size, num_kv_heads, _ = k_cache.shape
    group = num_q_heads // num_kv_heads
    out = torch.zeros(num_seqs, num_q_heads, head_dim, dtype=torch.float32, device=q.device)
    lse = torch.full((num_seqs, num_q_heads), float("-inf"), dtype=torch.float32, device=q.device)
    max_len = int(seq_lens.max()) if num_seqs else 0
    if max_len == 0:
        return out.to(q.dtype), lse
    lens = seq_lens.to(device=q.device, dtype=torch.int64)
    qg = q.float().view(num_seqs, num_kv_heads, group, head_dim)
    seqs_per_chunk, blocks_per_chunk = _chunk_shape(num_seqs, max_len, block_size, num_kv_heads * head_dim * 4)
    tokens_per_chunk = blocks_per_chunk * block_size
    flat_k, flat_v = k_cache.view(num_blocks, -1), v_cache.view(num_blocks, -1)
    raw = torch.empty(2, seqs_per_chunk * blocks_per_chunk, flat_k.shape[1], dtype=k_cache.dtype, device=q.device)
    kv = torch.empty(2, seqs_per_chunk, num_kv_heads, tokens_per_chunk, head_dim, dtype=torch.float32,
                     device=q.device)
    positions = torch.arange(tokens_per_chunk, device=q.device)
    num_cols = -(-max_len // block_size)
    for s0 in range(0, num_seqs, seqs_per_chunk):
        s1 = min(num_seqs, s0 + seqs_per_chunk)
        sg = s1 - s0
        first = True  # merging a first chunk with the empty partial would give the chunk back, bit for bit
        for c0 in range(0, num_cols, blocks_per_chunk):
            n = min(blocks_per_chunk, num_cols - c0)
            chunk_lens = (lens[s0:s1] - c0 * block_size).clamp(0, n * block_size)
            if not bool((chunk_lens > 0).any()):
                continue
            # Columns past a sequence's end may hold padding ids: clamp them to a valid block and mask later.
            ids = block_table[s0:s1, c0:c0 + n].to(torch.int64).clamp(0, num_blocks - 1).reshape(-1)
            tokens = n * block_size
            k, v = _gather(flat_k, ids, raw[0], kv[0], sg, n, tokens), _gather(flat_v, ids, raw[1], kv[1], sg, n, tokens)
            scores = torch.matmul(qg[s0:s1], k.transpose(-1, -2)) * scale  # [sg, Hkv, G, tokens]
            valid = positions[:tokens][None, :] < chunk_lens[:, None]
            scores.masked_fill_(~valid[:, None, None, :], float("-inf"))
            chunk_lse = torch.logsumexp(scores, dim=-1)  # [sg, Hkv, G]
            has = torch.isfinite(chunk_lse)
            probs = torch.exp(scores - torch.where(has, chunk_lse, torch.zeros_like(chunk_lse))[..., None])
            chunk_out = torch.matmul(probs, v).view(sg, num_q_heads, head_dim)
            if first:
                out[s0:s1], lse[s0:s1], first = chunk_out, chunk_lse.view(sg, num_q_heads), False
                continue
            merged_out, merged_lse = scale_reduce_torch(
                torch.stack([out[s0:s1], chunk_out]), torch.stack([lse[s0:s1], chunk_lse.view(sg, num_q_heads)]))
            out[s0:s1], lse[s0:s1] = merged_out, merged_lse
    return out.to(q.dtype), lse


def _gather(flat_cache, ids, raw, dst, num_seqs: int, num_blocks: int, tokens: int):
    """Blocks `ids` of one chunk -> fp32 [num_seqs, Hkv, tokens, D] in the reused buffer `dst`."""
    raw = raw[: ids.numel()]
    torch.index_select(flat_cache, 0, ids, out=raw)
    num_kv_heads, head_dim = dst.shape[1], dst.shape[3]
    src = raw.view(num_seqs, tokens, num_kv_heads, head_dim).transpose(1, 2)
    dst = dst[:num_seqs, :, :tokens]
    dst.copy_(src)
    return dst


def store_kv_torch(k, v, k_cache, v_cache, slots, has_padding: bool = True):
    """Same contract as `store_kv`: one index_copy per cache; slots < 0 are skipped."""
    flat_k = k_cache.view(-1, *k_cache.shape[2:])
    flat_v = v_cache.view(-1, *v_cache.shape[2:])
    slots = slots.to(torch.int64)
    if has_padding and bool((slots < 0).any()):
        keep = slots >= 0
        k, v, slots = k[keep], v[keep], slots[keep]
    flat_k.index_copy_(0, slots, k.to(flat_k.dtype))
    flat_v.index_copy_(0, slots, v.to(flat_v.dtype))


def silu_mul_torch(x):
    """Same contract as `silu_mul`: two pointwise ops in x.dtype (Hugging Face LLaMA's `act_fn(gate) * up`)."""
    gate, up = x.chunk(2, -1)
    return F.silu(gate) * up
