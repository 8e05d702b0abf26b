"""Triton kernels: MicroAttention over paged rBlocks (split-KV), the ScaleReduce merge, the in-place K/V store, and
the MLP's fused SiLU-mul.

Import through `reference_impl.kernels.backend.load_triton()`, which turns on the interpreter on CPU.
"""
import triton
import triton.language as tl


@triton.jit
def micro_attention_kernel(
    q_ptr, k_ptr, v_ptr, block_table_ptr, seq_lens_ptr, out_ptr, lse_ptr,
    scale,
    stride_q_seq, stride_q_head,
    stride_k_block, stride_k_tok, stride_k_head,
    stride_v_block, stride_v_tok, stride_v_head,
    stride_bt_seq,
    stride_o_split, stride_o_seq, stride_o_head,
    stride_l_split, stride_l_seq,
    GROUP: tl.constexpr, GROUP_PAD: tl.constexpr,
    HEAD_DIM: tl.constexpr, D_PAD: tl.constexpr,
    BLOCK_SIZE: tl.constexpr, TILE_N: tl.constexpr, TOKENS_PER_SPLIT: tl.constexpr,
    COMPUTE_FP32: tl.constexpr, DOT_PRECISION: tl.constexpr,
):
    # One program: one sequence, one KV head (and its whole group of query heads), one split of the tokens.
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    seq_len = tl.load(seq_lens_ptr + seq)
    start = split * TOKENS_PER_SPLIT
    end = tl.minimum(start + TOKENS_PER_SPLIT, seq_len)

    g = tl.arange(0, GROUP_PAD)
    d = tl.arange(0, D_PAD)
    g_mask = g < GROUP
    d_mask = d < HEAD_DIM
    q_heads = kv_head * GROUP + g
    q = tl.load(q_ptr + seq * stride_q_seq + q_heads[:, None] * stride_q_head + d[None, :],
                mask=g_mask[:, None] & d_mask[None, :], other=0.0)
    if COMPUTE_FP32:
        q = q.to(tl.float32)

    m = tl.full([GROUP_PAD], float("-inf"), dtype=tl.float32)
    l = tl.zeros([GROUP_PAD], dtype=tl.float32)
    acc = tl.zeros([GROUP_PAD, D_PAD], dtype=tl.float32)
    bt_row = block_table_ptr + seq * stride_bt_seq
    for tile_start in range(start, end, TILE_N):
        tok = tile_start + tl.arange(0, TILE_N)
        tok_mask = tok < end
        block = tl.load(bt_row + tok // BLOCK_SIZE, mask=tok_mask, other=0).to(tl.int64)
        slot = tok % BLOCK_SIZE
        kv_mask = tok_mask[:, None] & d_mask[None, :]
        k = tl.load(k_ptr + block[:, None] * stride_k_block + slot[:, None] * stride_k_tok
                    + kv_head * stride_k_head + d[None, :], mask=kv_mask, other=0.0)
        v = tl.load(v_ptr + block[:, None] * stride_v_block + slot[:, None] * stride_v_tok
                    + kv_head * stride_v_head + d[None, :], mask=kv_mask, other=0.0)
        if COMPUTE_FP32:
            k = k.to(tl.float32)
            v = v.to(tl.float32)
        scores = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * scale  # [GROUP_PAD, TILE_N]
        scores = tl.where(tok_mask[None, :], scores, float("-inf"))
        m_new = tl.maximum(m, tl.max(scores, axis=1))
        alpha = tl.exp(m - m_new)
        p = tl.exp(scores - m_new[:, None])
        l = l * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=DOT_PRECISION)
        m = m_new

    has_tokens = l > 0
    out = acc / tl.where(has_tokens, l, 1.0)[:, None]
    lse = tl.where(has_tokens, m + tl.log(tl.where(has_tokens, l, 1.0)), float("-inf"))
    o_off = split * stride_o_split + seq * stride_o_seq + q_heads[:, None] * stride_o_head + d[None, :]
    tl.store(out_ptr + o_off, out, mask=g_mask[:, None] & d_mask[None, :])
    tl.store(lse_ptr + split * stride_l_split + seq * stride_l_seq + q_heads, lse, mask=g_mask)


@triton.jit
def scale_reduce_kernel(
    outs_ptr, lses_ptr, out_ptr, lse_ptr,
    num_parts,
    stride_i_part, stride_i_seq, stride_i_head,
    stride_li_part, stride_li_seq,
    stride_o_seq, stride_o_head, stride_lo_seq,
    HEAD_DIM: tl.constexpr, D_PAD: tl.constexpr, PARTS_PAD: tl.constexpr,
):
    # One program: one (sequence, head); all parts at once, weighted by exp(lse_p - lse_total).
    seq = tl.program_id(0)
    head = tl.program_id(1)
    p = tl.arange(0, PARTS_PAD)
    d = tl.arange(0, D_PAD)
    p_mask = p < num_parts
    lses = tl.load(lses_ptr + p * stride_li_part + seq * stride_li_seq + head, mask=p_mask, other=float("-inf"))
    m = tl.max(lses, axis=0)
    non_empty = lses != float("-inf")
    w = tl.where(non_empty, tl.exp(lses - tl.where(m == float("-inf"), 0.0, m)), 0.0)
    total = tl.sum(w, axis=0)
    outs = tl.load(outs_ptr + p[:, None] * stride_i_part + seq * stride_i_seq + head * stride_i_head + d[None, :],
                   mask=non_empty[:, None] & (d[None, :] < HEAD_DIM), other=0.0).to(tl.float32)
    safe_total = tl.where(total > 0, total, 1.0)
    out = tl.sum(w[:, None] * outs, axis=0) / safe_total
    lse = tl.where(total > 0, m + tl.log(safe_total), float("-inf"))
    tl.store(out_ptr + seq * stride_o_seq + head * stride_o_head + d, out, mask=d < HEAD_DIM)
    tl.store(lse_ptr + seq * stride_lo_seq + head, lse)


@triton.jit
def store_kv_kernel(
    k_ptr, v_ptr, k_cache_ptr, v_cache_ptr, slots_ptr,
    stride_k_tok, stride_v_tok, stride_kc_slot, stride_vc_slot,
    ROW: tl.constexpr, ROW_PAD: tl.constexpr,
):
    # One program: one new token's K and V row (all KV heads) written at its slot; slot -1 (padding) is skipped.
    tok = tl.program_id(0)
    slot = tl.load(slots_ptr + tok).to(tl.int64)
    offs = tl.arange(0, ROW_PAD)
    mask = offs < tl.where(slot >= 0, ROW, 0)
    k = tl.load(k_ptr + tok * stride_k_tok + offs, mask=mask, other=0.0)
    v = tl.load(v_ptr + tok * stride_v_tok + offs, mask=mask, other=0.0)
    tl.store(k_cache_ptr + slot * stride_kc_slot + offs, k.to(k_cache_ptr.dtype.element_ty), mask=mask)
    tl.store(v_cache_ptr + slot * stride_vc_slot + offs, v.to(v_cache_ptr.dtype.element_ty), mask=mask)


@triton.jit
def silu_mul_kernel(x_ptr, out_ptr, width, stride_x_row, stride_o_row, BLOCK: tl.constexpr):
    # One program: BLOCK columns of one row; the gate is x[:, :width], the up projection x[:, width:] (fp32 math).
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < width
    gate = tl.load(x_ptr + row * stride_x_row + cols, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(x_ptr + row * stride_x_row + width + cols, mask=mask, other=0.0).to(tl.float32)
    out = gate / (1.0 + tl.exp(-gate)) * up
    tl.store(out_ptr + row * stride_o_row + cols, out.to(out_ptr.dtype.element_ty), mask=mask)
