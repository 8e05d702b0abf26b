"""Part 3: real engine steps of a LLaMA2-7B-shaped model (random weights) beside the simulator's cost model.

A step is `LocalBackend.execute` as the engine calls it (the step's plan, the decoder with DistAttention over
paged rBlocks, the LM head, the sampled ids back on the host), timed from the host; the KV of a point lies in
blocks scattered at random over the cache, as in a cache that has seen many requests come and go. Decode steps
run from CUDA graphs and eagerly (`without_graphs`) in the same run, over the same caches; each gets its achieved
bandwidth (weights + KV read, over the step time) against the device's HBM peak, and each prefill its achieved
TFLOP/s (2 x parameters x tokens + causal attention) against the dense fp16/bf16 peak. Several prompts prefilled in
one step, and the fused SiLU-mul, are measured against their switched-off paths (step_variants.py)."""
import statistics
import time
from dataclasses import replace

import numpy as np
import torch

from reference_impl.backends.local import LocalBackend
from reference_impl.calibration.model import CalibratedPerfModel
from reference_impl.calibration.perf_model import InstanceLoad, causal_prefill_pairs, step_time_s
from reference_impl.calibration.specs import model_spec
from reference_impl.control.engine import EngineConfig
from reference_impl.control.sequence import num_blocks_for
from reference_impl.model.llama import random_model
from repro.benchmarks.timing import peak_bandwidth_gb_s
from repro.validate_gpu.sizes import COMMITTED_GPU, COMMITTED_MODEL
from repro.validate_gpu.step_timing import (BLOCK_SIZE, on_instance, prefill_flops, run_step, sequences,
                                              sync, timed_step_s)
from repro.validate_gpu.step_variants import packed_points, silu_mul_decode

SEED = 0
GPU_PEAK_TFLOPS = {"A100": 312.0, "H100": 989.0, "H200": 989.0}  # dense fp16/bf16, datasheets (SXM)


def peak_tflops(device: torch.device) -> float | None:
    """The device's dense fp16/bf16 peak (None off the table, e.g. a CPU)."""
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((tf for key, tf in GPU_PEAK_TFLOPS.items() if key in name), None)


def weight_bytes_read(model) -> int:
    """Bytes of weights a decode step reads: every matrix but the embedding table (only its rows are read)."""
    tied = "lm_head.weight" not in model.w
    return sum(w.numel() * w.element_size() for name, w in model.w.items()
               if tied or name != "model.embed_tokens.weight")


def attention_time_s(backend, seqs, tables, reps: int = 3) -> float:
    """Median over `reps` steps of the time one decode step spends in its layers' attention (the new K/V written,
    MicroAttention over the rBlocks, the merge), summed over the layers: CUDA events around each layer's call on
    a GPU, where the host's launches of the whole step outlast the device's work and hide it from a step's wall
    time."""
    cuda = backend.device.type == "cuda"
    totals = []
    plan = backend.step_kv

    def timed_plan(*args):
        kv = plan(*args)
        attend = kv.attend

        def timed(layer, q, k, v):
            if cuda:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                out = attend(layer, q, k, v)
                end.record()
                spans.append((start, end))
            else:
                t0 = time.perf_counter()
                out = attend(layer, q, k, v)
                spans.append(time.perf_counter() - t0)
            return out
        kv.attend = timed
        return kv

    backend.step_kv = timed_plan
    try:
        for _ in range(reps):
            spans = []
            run_step(backend, seqs, tables, False)
            sync(backend.device)
            totals.append(sum(s.elapsed_time(e) / 1e3 for s, e in spans) if cuda else sum(spans))
    finally:
        del backend.step_kv  # the class's own method again
    return statistics.median(totals)


def decode_grid(batches, contexts, capacity_tokens: int):
    """(batch, context) points whose KV fits `capacity_tokens`, and those skipped."""
    fits, skipped = [], []
    for b in batches:
        for ctx in contexts:
            (fits if b * -(-ctx // BLOCK_SIZE) * BLOCK_SIZE <= capacity_tokens else skipped).append((b, ctx))
    return fits, skipped


def run(size, device: torch.device) -> dict:
    spec = model_spec(size.model)
    config = replace(spec, num_layers=size.num_layers)
    dtype = getattr(torch, size.dtype)
    model = random_model(config, SEED, dtype, device)
    predictor = CalibratedPerfModel.for_setting(model=COMMITTED_MODEL, gpu=COMMITTED_GPU, link="intra-node")
    kv_bytes_per_token = 2 * config.num_layers * config.num_kv_heads * config.head_dim * dtype.itemsize
    capacity = int(size.max_kv_gib * 2**30 // kv_bytes_per_token) // BLOCK_SIZE * BLOCK_SIZE
    fits, skipped = decode_grid(size.batches, size.contexts, capacity)
    rng = np.random.default_rng(SEED)
    points = []
    need = max(b * num_blocks_for(ctx, BLOCK_SIZE) for b, ctx in fits)
    t0 = time.perf_counter()
    backend = LocalBackend(model, EngineConfig(1, need, block_size=BLOCK_SIZE, max_batch_size=max(size.batches)),
                           device=device, eager=False, graph_max_tokens=max(ctx for _, ctx in fits))
    capture_s = time.perf_counter() - t0
    weights = weight_bytes_read(model)
    peak_gb_s, peak_source = peak_bandwidth_gb_s(device)
    for b, ctx in fits:
        blocks = num_blocks_for(ctx, BLOCK_SIZE)
        order = rng.permutation(need)[: b * blocks].reshape(b, blocks).tolist()
        tables = [on_instance(t) for t in order]
        seqs = sequences(b, ctx, config.vocab_size, rng, True)
        measured = timed_step_s(backend, seqs, tables, False, size.reps)
        with backend.without_graphs():
            eager_s = timed_step_s(backend, seqs, tables, False, size.reps)
            attention_s = attention_time_s(backend, seqs, tables)
        load = InstanceLoad(batch_size=b, attn_kv_tokens=b * blocks * BLOCK_SIZE)  # as the simulator counts it
        predicted = step_time_s(predictor, load)
        kv_bytes = b * ctx * kv_bytes_per_token
        step_gb_s = (weights + kv_bytes) / measured / 1e9
        points.append({"kind": "decode", "batch": b, "context": ctx, "kv_bytes": kv_bytes, "measured_s": measured,
                       "eager_s": eager_s, "graph_speedup": eager_s / measured,
                       "step_gb_s": step_gb_s, "step_pct_of_peak": 100 * step_gb_s / peak_gb_s,
                       "predicted_s": predicted, "ratio": measured / predicted, "attention_s": attention_s,
                       "attention_kv_gb_s": kv_bytes / attention_s / 1e9,
                       "predicted_attention_s": load.attn_kv_tokens * predictor.kv_read_s_per_token * predictor.num_layers})
    decode_graphs = {"captured": sorted(backend.graphs.graphs), "buckets": backend.graphs.sizes,
                     "capture_s": capture_s, "eager_steps": backend.graphs.num_eager,
                     "replays": backend.graphs.num_replays}
    del backend
    if device.type == "cuda":
        torch.cuda.empty_cache()
    peak_tf = peak_tflops(device)
    longest = max(size.prefill_lens)
    backend = LocalBackend(model, EngineConfig(1, num_blocks_for(longest, BLOCK_SIZE), block_size=BLOCK_SIZE),
                           device=device, eager=True)
    for n in size.prefill_lens:
        table = [on_instance(list(range(num_blocks_for(n, BLOCK_SIZE))))]
        measured = timed_step_s(backend, sequences(1, n, config.vocab_size, rng, False), table, True,
                                max(1, size.reps - 2))
        predicted = step_time_s(predictor, InstanceLoad(0, 0, prefill_tokens=n,
                                                        prefill_attn_pairs=causal_prefill_pairs(n)))
        tflops = prefill_flops(config, n) / measured / 1e12
        points.append({"kind": "prefill", "batch": 1, "context": n, "kv_bytes": 0, "measured_s": measured,
                       "predicted_s": predicted, "ratio": measured / predicted, "tflops": tflops,
                       "tflops_pct_of_peak": None if peak_tf is None else 100 * tflops / peak_tf})
    del backend
    if device.type == "cuda":
        torch.cuda.empty_cache()

    packed = packed_points(model, size, device, rng, predictor, peak_tf)
    silu_decode = silu_mul_decode(model, size, device, rng)
    for p in points:
        if p["kind"] == "decode":
            p["attention_pct_of_peak"] = 100 * p["attention_kv_gb_s"] / peak_gb_s
    big = [p for p in points if p["kind"] == "decode" and p["kv_bytes"] >= 2**30] or \
        [p for p in points if p["kind"] == "decode"]

    decode = [p for p in points if p["kind"] == "decode"]  # the first: the smallest batch and context
    prefill = [p for p in points if p["kind"] == "prefill"]

    def median_ratio(kind):
        return statistics.median(p["ratio"] for p in points if p["kind"] == kind)

    return {"passed": True, "model": spec.name, "num_layers": config.num_layers, "dtype": size.dtype,
            "predicted_with": f"{COMMITTED_MODEL} on {COMMITTED_GPU} (the committed calibration the figures use)",
            "shape_matches_prediction": spec.name == COMMITTED_MODEL and config.num_layers == predictor.num_layers,
            "kv_capacity_tokens": capacity, "skipped": [{"batch": b, "context": c} for b, c in skipped],
            "points": points, "peak_gb_s": peak_gb_s, "peak_source": peak_source, "peak_tflops": peak_tf,
            "weight_bytes": weights, "decode_graphs": decode_graphs, "packed_prefill": packed,
            "silu_mul_decode": silu_decode,
            "headline": {"decode_median_ratio": median_ratio("decode"), "prefill_median_ratio": median_ratio("prefill"),
                         "decode_points": sum(p["kind"] == "decode" for p in points),
                         "prefill_points": sum(p["kind"] == "prefill" for p in points),
                         "attention_kv_gb_s_min": min(p["attention_kv_gb_s"] for p in big),
                         "attention_kv_gb_s_max": max(p["attention_kv_gb_s"] for p in big),
                         "attention_pct_of_peak_max": max(p["attention_pct_of_peak"] for p in big),
                         "decode_ratio_max": max(p["ratio"] for p in points if p["kind"] == "decode"),
                         "decode_step_pct_of_peak_first": decode[0]["step_pct_of_peak"],
                         "decode_step_pct_of_peak_max": max(p["step_pct_of_peak"] for p in decode),
                         "graph_speedup_median": statistics.median(p["graph_speedup"] for p in decode),
                         "prefill_tflops_max": max(p["tflops"] for p in prefill),
                         "prefill_pct_of_peak_max": None if peak_tf is None else
                         max(p["tflops_pct_of_peak"] for p in prefill),
                         "prefill_ratio_longest": prefill[-1]["ratio"],
                         "packed_speedup_median": statistics.median(p["packed_speedup"] for p in packed),
                         "packed_ratio_median": statistics.median(p["ratio"] for p in packed),
                         "silu_mul_prefill_speedup_median": statistics.median(p["silu_mul_speedup"] for p in packed),
                         "silu_mul_decode_speedup": silu_decode["silu_mul_speedup"]}}
