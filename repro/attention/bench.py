"""Decode-attention benchmark: paged MicroAttention vs torch SDPA on contiguous KV, in the same run."""
from dataclasses import asdict, dataclass, field

import torch
import torch.nn.functional as F

from reference_impl.kernels import micro_attention
from repro.benchmarks.timing import peak_bandwidth_gb_s, time_call_s, time_graph_replay_s

# (num_q_heads, num_kv_heads, head_dim) from the models' Hugging Face config.json
MODEL_HEADS = {"llama2-7b": (32, 32, 128), "llama2-70b": (64, 8, 128)}
BLOCK_SIZE = 16
# Peak host/device memory of one point, in multiples of its KV bytes: the cache, SDPA's contiguous copy,
# and on CPU the gathered fp32 working copies of the torch path.
MEMORY_FACTOR = {"cpu": 6, "cuda": 2.5}


@dataclass(slots=True)
class AttentionBenchPoint:
    model: str
    num_q_heads: int
    num_kv_heads: int
    head_dim: int
    context_tokens: int
    batch: int
    kv_bytes: int
    time_ms: float | None = None
    achieved_gb_s: float | None = None
    pct_of_peak: float | None = None
    sdpa_time_ms: float | None = None
    speedup_vs_sdpa: float | None = None  # SDPA time / our time: > 1 means faster than SDPA
    max_abs_diff_vs_sdpa: float | None = None
    # GPU only: both captured in a CUDA graph and replayed, which removes the host's launch cost (about 0.1 ms
    # per Triton launch from Python) that dominates eager timings of small points
    graph_time_ms: float | None = None
    graph_gb_s: float | None = None
    graph_pct_of_peak: float | None = None
    sdpa_graph_time_ms: float | None = None
    graph_speedup_vs_sdpa: float | None = None
    skipped: str | None = None


@dataclass(slots=True)
class AttentionBenchResult:
    device: str
    backend: str
    dtype: str
    block_size: int
    peak_gb_s: float
    peak_source: str
    points: list[AttentionBenchPoint] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def kv_bytes(batch: int, context_tokens: int, num_kv_heads: int, head_dim: int, dtype: torch.dtype) -> int:
    return 2 * batch * context_tokens * num_kv_heads * head_dim * torch.finfo(dtype).bits // 8


def paged_inputs(point: AttentionBenchPoint, device: torch.device, dtype: torch.dtype, gen: torch.Generator):
    """(q [B, Hq, D], k_cache, v_cache [num_blocks, BLOCK_SIZE, Hkv, D], block_table [B, blocks], seq_lens [B])
    of one point, its blocks scattered as in a paged cache that has seen many requests come and go."""
    batch, ctx = point.batch, point.context_tokens
    hq, hkv, d = point.num_q_heads, point.num_kv_heads, point.head_dim
    blocks_per_seq = -(-ctx // BLOCK_SIZE)
    num_blocks = batch * blocks_per_seq
    # Drawn where they live: filling GiBs of KV on the host and copying it over would dominate the run.
    k_cache = torch.randn(num_blocks, BLOCK_SIZE, hkv, d, generator=gen, dtype=dtype, device=device)
    v_cache = torch.randn(num_blocks, BLOCK_SIZE, hkv, d, generator=gen, dtype=dtype, device=device)
    q = torch.randn(batch, hq, d, generator=gen, dtype=dtype, device=device)
    block_table = torch.randperm(num_blocks, generator=gen, device=device).view(batch, blocks_per_seq).to(torch.int32)
    seq_lens = torch.full((batch,), ctx, dtype=torch.int32, device=device)
    return q, k_cache, v_cache, block_table, seq_lens


def contiguous_kv(k_cache, v_cache, block_table, context_tokens: int):
    """The paged KV gathered into contiguous [B, Hkv, L, D] tensors (SDPA's input)."""
    batch, (hkv, d) = block_table.shape[0], k_cache.shape[2:]
    flat = block_table.long().view(-1)
    k = k_cache[flat].view(batch, -1, hkv, d)[:, :context_tokens].transpose(1, 2).contiguous()
    v = v_cache[flat].view(batch, -1, hkv, d)[:, :context_tokens].transpose(1, 2).contiguous()
    return k, v


def run_point(point: AttentionBenchPoint, device: torch.device, dtype: torch.dtype, backend: str,
              peak_gb_s: float, gen: torch.Generator) -> None:
    hq, hkv = point.num_q_heads, point.num_kv_heads
    q, k_cache, v_cache, block_table, seq_lens = paged_inputs(point, device, dtype, gen)

    def ours():
        return micro_attention(q, k_cache, v_cache, block_table, seq_lens, backend=backend, check_ranges=False)

    seconds = time_call_s(ours, device, **_reps(device))
    out, _ = ours()
    point.time_ms = seconds * 1e3
    point.achieved_gb_s = point.kv_bytes / seconds / 1e9
    point.pct_of_peak = 100 * point.achieved_gb_s / peak_gb_s
    if device.type == "cuda":
        graph_s = time_graph_replay_s(ours, device, **_reps(device))
        point.graph_time_ms = graph_s * 1e3
        point.graph_gb_s = point.kv_bytes / graph_s / 1e9
        point.graph_pct_of_peak = 100 * point.graph_gb_s / peak_gb_s

    k, v = contiguous_kv(k_cache, v_cache, block_table, point.context_tokens)
    del k_cache, v_cache
    q4 = q[:, :, None, :]  # [B, Hq, 1, D]

    def sdpa():
        return F.scaled_dot_product_attention(q4, k, v, enable_gqa=hq != hkv)

    sdpa_seconds = time_call_s(sdpa, device, **_reps(device))
    point.sdpa_time_ms = sdpa_seconds * 1e3
    point.speedup_vs_sdpa = sdpa_seconds / seconds
    if device.type == "cuda":
        point.sdpa_graph_time_ms = time_graph_replay_s(sdpa, device, **_reps(device)) * 1e3
        point.graph_speedup_vs_sdpa = point.sdpa_graph_time_ms / point.graph_time_ms
    point.max_abs_diff_vs_sdpa = (sdpa()[:, :, 0].float() - out.float()).abs().max().item()


def _reps(device: torch.device) -> dict:
    return {"warmup": 3, "reps": 20} if device.type == "cuda" else {"warmup": 1, "reps": 3}


def run_attention_bench(models, contexts, batches, *, dtype: torch.dtype, backend: str, max_kv_bytes: int,
                        device: torch.device, seed: int = 0, progress=None) -> AttentionBenchResult:
    peak_gb_s, peak_source = peak_bandwidth_gb_s(device)
    result = AttentionBenchResult(str(device), backend, str(dtype).removeprefix("torch."), BLOCK_SIZE,
                                  peak_gb_s, peak_source)
    gen = torch.Generator(device=device).manual_seed(seed)
    for model in models:
        hq, hkv, d = MODEL_HEADS[model]
        for ctx in contexts:
            for batch in batches:
                point = AttentionBenchPoint(model, hq, hkv, d, ctx, batch, kv_bytes(batch, ctx, hkv, d, dtype))
                budget = point.kv_bytes * MEMORY_FACTOR[device.type]
                if point.kv_bytes > max_kv_bytes:
                    point.skipped = (f"KV {point.kv_bytes / 2**30:.1f} GiB (about {budget / 2**30:.0f} GiB with "
                                     f"working copies) is over --max-kv-gib")
                else:
                    run_point(point, device, dtype, backend, peak_gb_s, gen)
                    if device.type == "cuda":
                        torch.cuda.empty_cache()
                result.points.append(point)
                if progress is not None:
                    progress(point)
    return result
