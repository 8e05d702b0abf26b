"""`repro profile`: measure the cost model's inputs on the machine at hand, in the calibration format.

Non-attention: one LLaMA decoder layer's non-attention ops (norms, QKV, RoPE, O, gated MLP, residual)
built in torch for the chosen model. Attention: KV bytes read per second by the project's own
micro_attention (slope of time vs KV bytes over several context lengths; the intercept is the fixed cost of
a call). Prefill attention: FLOPs per second of the engine's own causal prefill attention (kv_layer). memcpy:
tensor copies, used as the "intra-node" link (instances sharing this machine). There is one device here, so no
all-reduce or inter-node link. Step overhead: the real engine's step outside its decoder layers
(profile_overhead.py).
"""
import os
import time
from dataclasses import dataclass

import numpy as np
import torch

from reference_impl.calibration.curve import fit_curve, round_sig
from reference_impl.calibration.engine_steps import op_level_model
from reference_impl.calibration.fit import FORMAT, NON_ATTENTION_MAX_REL_ERR, curve_entry
from reference_impl.profiling.step_overhead import measure_overhead
from reference_impl.model.config import ModelConfig
from reference_impl.kernels import micro_attention
from reference_impl.model.kv_layer import causal_partial_attention

GPU_TOKENS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096)


@dataclass(frozen=True, slots=True)
class ProfilePlan:
    tokens: tuple[int, ...]
    kv_lens: tuple[int, ...]
    copy_bytes: tuple[int, ...]
    prefill_tokens: int
    repeats: int
    overhead_batches: tuple[int, ...]
    overhead_prefill_seqs: tuple[int, ...]
    overhead_prompt_len: int = 64
    overhead_context_tokens: int = 128
    num_seqs: int = 4
    block_size: int = 16
    clock: str = "wall"  # "cpu": this process's CPU time, on a CPU shared with other work (never on a GPU)

    @classmethod
    def make(cls, quick: bool, on_gpu: bool = False) -> "ProfilePlan":
        if on_gpu and not quick:
            # A GPU reads a few MB of KV in less time than a kernel launch costs: the slope needs GBs.
            return cls(tokens=GPU_TOKENS, kv_lens=(16384, 32768, 65536, 131072),
                       copy_bytes=tuple(1 << k for k in range(16, 31, 2)), prefill_tokens=4096, repeats=7,
                       overhead_batches=(1, 4, 16, 64, 256), overhead_prefill_seqs=(1, 4, 16),
                       overhead_prompt_len=512, overhead_context_tokens=1024)
        if quick:
            return cls(tokens=(1, 4, 16, 64), kv_lens=(256, 1024), copy_bytes=(1 << 12, 1 << 16, 1 << 20),
                       prefill_tokens=128, repeats=3, overhead_batches=(1, 4, 16), overhead_prefill_seqs=(1, 4),
                       overhead_prompt_len=16, overhead_context_tokens=32)
        return cls(tokens=(1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024),
                   kv_lens=(1024, 2048, 4096, 8192), copy_bytes=tuple(1 << k for k in range(12, 27, 2)),
                   prefill_tokens=1024, repeats=7, overhead_batches=(1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64),
                   overhead_prefill_seqs=(1, 2, 4, 8, 16))


MIN_SAMPLE_S = 2e-3  # calls are batched into samples of at least this long, above timer and scheduler noise


def timer(clock: str, device: torch.device):
    """The function that reads the clock: time.perf_counter, or time.process_time for "cpu" on a CPU device."""
    if clock == "cpu" and device.type == "cpu":
        return time.process_time
    return time.perf_counter


def _timed_median_s(fn, device: torch.device, repeats: int, clock: str = "wall") -> float:
    """Median seconds per call of `fn` over `repeats` samples."""
    now = timer(clock, device)

    def sample_s(calls: int) -> float:
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = now()
        for _ in range(calls):
            fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return (now() - start) / calls

    calls = max(1, min(1000, int(MIN_SAMPLE_S / max(sample_s(1), 1e-7))))  # the first call also warms up
    return float(np.median([sample_s(calls) for _ in range(repeats)]))


def _rotate(x, cos, sin):
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


def _layer_fn(spec: ModelConfig, tokens: int, device, dtype, gen):
    """Closure running one decoder layer's non-attention ops on `tokens` tokens: x [tokens, hidden]."""
    h, d, hq, hkv = spec.hidden_size, spec.head_dim, spec.num_heads, spec.num_kv_heads
    w = lambda *shape: torch.randn(*shape, generator=gen, device="cpu").mul_(0.02).to(device, dtype)  # noqa: E731
    w_qkv, w_o = w((hq + 2 * hkv) * d, h), w(h, hq * d)
    w_gate_up, w_down = w(2 * spec.intermediate_size, h), w(h, spec.intermediate_size)
    norm1, norm2 = torch.ones(h, device=device, dtype=dtype), torch.ones(h, device=device, dtype=dtype)
    x = w(tokens, h)
    angle = torch.arange(tokens, device=device)[:, None] * torch.arange(d, device=device)[None, :] * 1e-3
    cos, sin = angle.cos().to(dtype)[:, None, :], angle.sin().to(dtype)[:, None, :]
    attn_out = w(tokens, hq * d)  # stands in for the attention result, timed separately

    def rms(v, g):
        return v * torch.rsqrt(v.float().pow(2).mean(-1, keepdim=True) + 1e-5).to(v.dtype) * g

    @torch.inference_mode()
    def run():
        qkv = torch.nn.functional.linear(rms(x, norm1), w_qkv)
        q, k, _ = qkv.split([hq * d, hkv * d, hkv * d], dim=-1)
        _rotate(q.view(tokens, hq, d), cos, sin), _rotate(k.view(tokens, hkv, d), cos, sin)
        y = x + torch.nn.functional.linear(attn_out, w_o)
        gate, up = torch.nn.functional.linear(rms(y, norm2), w_gate_up).chunk(2, dim=-1)
        return y + torch.nn.functional.linear(torch.nn.functional.silu(gate) * up, w_down)

    return run


def _kv_read(spec: ModelConfig, plan: ProfilePlan, device, dtype, gen) -> tuple[float, float]:
    """(KV bytes read per second, seconds per call beyond the read) of micro_attention over the plan's lengths."""
    # The kernel a deployment runs: Triton on a GPU; on CPU the torch path (the interpreter is no measure).
    backend = "triton" if device.type == "cuda" else "torch"
    rows = []
    for kv_len in plan.kv_lens:
        blocks_per_seq = -(-kv_len // plan.block_size)
        num_blocks = plan.num_seqs * blocks_per_seq
        shape = (num_blocks, plan.block_size, spec.num_kv_heads, spec.head_dim)
        k = _randn(shape, gen, device, dtype)
        v = _randn(shape, gen, device, dtype)
        q = torch.randn(plan.num_seqs, spec.num_heads, spec.head_dim, generator=gen).to(device, dtype)
        table = torch.arange(num_blocks, dtype=torch.int32, device=device).view(plan.num_seqs, blocks_per_seq)
        lens = torch.full((plan.num_seqs,), kv_len, dtype=torch.int32, device=device)
        run = lambda: micro_attention(q, k, v, table, lens, backend=backend, check_ranges=False)  # noqa: E731
        kv_bytes = 2 * plan.num_seqs * kv_len * spec.num_kv_heads * spec.head_dim * k.element_size()
        rows.append((kv_bytes, _timed_median_s(run, device, plan.repeats, plan.clock)))
    kv_bytes, times = np.array(rows).T
    slope, intercept = np.polyfit(kv_bytes, times, 1) if len(rows) > 1 else (0.0, 0.0)
    if not slope > 0:
        return float(kv_bytes[-1] / times[-1]), 0.0
    return float(1.0 / slope), max(0.0, float(intercept))


def _randn(shape, gen: torch.Generator, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    if device.type == "cpu":
        return torch.randn(*shape, generator=gen).to(dtype)
    # GiBs drawn on the host and copied over would take longer than the measurement
    dev_gen = torch.Generator(device=device).manual_seed(int(torch.randint(2**31, (1,), generator=gen)))
    return torch.randn(*shape, generator=dev_gen, device=device, dtype=dtype)


def _prefill_attn_flops_per_s(spec: ModelConfig, plan: ProfilePlan, device, dtype, gen) -> float:
    n = plan.prefill_tokens
    q = torch.randn(n, spec.num_heads, spec.head_dim, generator=gen).to(device, dtype)
    k, v = (torch.randn(n, spec.num_kv_heads, spec.head_dim, generator=gen).to(device, dtype) for _ in range(2))
    pos = torch.arange(n, device=device)
    run = lambda: causal_partial_attention(q, k, v, pos, pos, spec.head_dim ** -0.5)  # noqa: E731
    return 4 * spec.hidden_size * (n * (n + 1) // 2) / _timed_median_s(run, device, plan.repeats, plan.clock)


def _memcpy(plan: ProfilePlan, device) -> tuple[list[int], list[float]]:
    sizes, times = [], []
    for size in plan.copy_bytes:
        src = torch.empty(size, dtype=torch.uint8, device=device).fill_(1)
        dst = torch.empty_like(src)
        sizes.append(size)
        times.append(_timed_median_s(lambda: dst.copy_(src), device, plan.repeats, plan.clock))
    return sizes, times


def _mem_bytes(device: torch.device) -> float:
    if device.type == "cuda":
        return float(torch.cuda.get_device_properties(device).total_memory)
    return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def profile(spec: ModelConfig, *, name: str, device: torch.device, dtype: torch.dtype, quick: bool, seed: int,
            plan: ProfilePlan | None = None) -> dict:
    """Measure everything the cost model needs for `spec` at tp=1 on `device`; returns the document."""
    plan = plan or ProfilePlan.make(quick, on_gpu=device.type == "cuda")
    gen = torch.Generator().manual_seed(seed)
    times = [_timed_median_s(_layer_fn(spec, n, device, dtype, gen), device, plan.repeats, plan.clock) for n in plan.tokens]
    sizes, copy_s = _memcpy(plan, device)
    memcpy_rate = sizes[-1] / copy_s[-1]
    source = f"repro profile on {name}"
    kernel = "Triton" if device.type == "cuda" else "torch"
    kv_read_rate, call_s = _kv_read(spec, plan, device, dtype, gen)
    hardware = {
        "dtype_bytes": torch.empty(0, dtype=dtype).element_size(), "mem_bytes": _mem_bytes(device),
        "gpus_per_node": 1, "memcpy_bytes_per_s": round_sig(memcpy_rate),
        "non_attention_s": {spec.name: {"1": curve_entry(
            fit_curve(plan.tokens, times, max_rel_err=NON_ATTENTION_MAX_REL_ERR), plan.tokens, times, source)}},
        "all_reduce_s": {},
        "send_recv_s": {"intra-node": curve_entry(fit_curve(sizes, copy_s, max_rel_err=0.0), sizes, copy_s, source)},
        "attention": {"kv_read_bytes_per_s": round_sig(kv_read_rate), "call_s": round_sig(call_s),
                      "prefill_attn_flops_per_s": round_sig(_prefill_attn_flops_per_s(spec, plan, device, dtype, gen)),
                      "source": source,
                      "derivation": f"slope of micro_attention ({kernel} path) time vs KV bytes over context lengths "
                                    f"{list(plan.kv_lens)} (call_s: its intercept, for information); the engine's causal prefill "
                                    f"attention (kv_layer.causal_partial_attention) at {plan.prefill_tokens} tokens"},
    }
    doc = {"format": FORMAT, "generated_by": "repro profile", "hardware": {name: hardware},
           "profile": {"model": spec.name, "device": str(device), "dtype": str(dtype).removeprefix("torch."),
                       "torch": torch.__version__, "threads": torch.get_num_threads(), "quick": quick, "seed": seed,
                       "clock": plan.clock}}
    hardware["step_overhead_s"] = {spec.name: measure_overhead(
        spec, op_level_model(doc, spec.name, name), batches=plan.overhead_batches,
        prompt_len=plan.overhead_prompt_len, prefill_seqs=plan.overhead_prefill_seqs,
        context_tokens=plan.overhead_context_tokens, repeats=plan.repeats, now=timer(plan.clock, device),
        device=device, dtype=dtype, seed=seed, source=source)}
    return doc

