"""Our local engine and real vLLM on the same model folder and the same requests, in one run.

Both serve every request from t=0 (an offline batch) with the same KV budget, batch limit and block size;
greedy tokens are compared position by position and throughput is output tokens / makespan of each.
"""
import tempfile
import time
from dataclasses import asdict, dataclass

import numpy as np
import torch

from baselines.real_vllm.backend import random_prompts, run_vllm
from baselines.real_vllm.compare_config import CompareConfig
from baselines.real_vllm.config import VllmSetup
from baselines.real_vllm.metrics import FINISHED, REJECTED, ServedRequest, summarize
from baselines.real_vllm.model import model_folder, resolve_for_vllm
from reference_impl.backends.local import LocalBackend, check_prompts
from reference_impl.control.engine import Engine, EngineConfig
from reference_impl.errors import InputError
from reference_impl.model.llama import LlamaModel
from reference_impl.control.sequence import Sequence, num_blocks_for
from workloads import SourceOptions, generate


def workload(config: CompareConfig, vocab_size: int) -> tuple[list[list[int]], list[int]]:
    """(prompt token ids, max new tokens) per request: trace lengths clipped to the config's caps."""
    reqs = generate(trace_id=config.trace_id, num_requests=config.num_requests, rate_per_s=1.0, seed=config.seed,
                    options=SourceOptions(source="fitted"))
    prompt_lens = [min(r.prompt_len, config.max_prompt_len) for r in reqs]
    prompts = random_prompts(prompt_lens, vocab_size, np.random.default_rng(config.seed))
    return prompts, [min(r.output_len, config.max_output_len) for r in reqs]


@dataclass(slots=True)
class LocalRun:
    served: list[ServedRequest]
    token_ids: list[list[int]]
    run_s: float
    step_end_s: list[float]
    step_tokens: list[int]


def serve_local(model: LlamaModel, prompts: list[list[int]], max_tokens: list[int], config: EngineConfig,
                arrivals_s: list[float] | None = None) -> LocalRun:
    """Our engine serving the prompts as they arrive on the wall clock (all at t=0 without arrivals).

    A request that fits nowhere (EngineConfig.check_fits) is recorded rejected, like vLLM-M's."""
    check_prompts(model, prompts)
    arrivals_s = arrivals_s if arrivals_s is not None else [0.0] * len(prompts)
    engine = Engine(config, LocalBackend(model, config))
    seqs = [Sequence(i, list(p), m, None) for i, (p, m) in enumerate(zip(prompts, max_tokens))]
    served = [ServedRequest(i, a, len(p), m) for i, (p, m, a) in enumerate(zip(prompts, max_tokens, arrivals_s))]
    pending = sorted(range(len(seqs)), key=lambda i: (-arrivals_s[i], -i))
    step_end_s, step_tokens, generated = [], [], 0
    t0 = time.perf_counter()
    while pending or engine.has_work:
        while pending and arrivals_s[pending[-1]] <= time.perf_counter() - t0:
            i = pending.pop()
            try:
                served[i].engine = engine.add_request(seqs[i])
            except InputError:
                served[i].status = REJECTED
        if not engine.has_work:
            time.sleep(max(0.0, arrivals_s[pending[-1]] - (time.perf_counter() - t0)))
            continue
        engine.step()
        now_s = time.perf_counter() - t0
        total = sum(len(s.output_ids) for s in seqs)
        if total > generated:
            step_end_s.append(now_s)
            step_tokens.append(total - generated)
            generated = total
        for seq, rec in zip(seqs, served):
            if seq.output_ids and rec.first_token_s is None:
                rec.first_token_s = now_s
            if seq.is_finished and rec.finish_s is None:
                rec.finish_s, rec.status, rec.output_len = now_s, FINISHED, len(seq.output_ids)
    return LocalRun(served, [s.output_ids for s in seqs], time.perf_counter() - t0, step_end_s, step_tokens)


def agreement(ours: list[list[int]], theirs: list[list[int]]) -> dict:
    """Identical requests, matching positions, and where each request first differs (None: never)."""
    first_diff = []
    matching = total = 0
    for a, b in zip(ours, theirs):
        n = max(len(a), len(b))
        same = [i < len(a) and i < len(b) and a[i] == b[i] for i in range(n)]
        matching += sum(same)
        total += n
        first_diff.append(next((i for i, s in enumerate(same) if not s), None))
    return {"num_requests": len(ours), "num_identical": sum(d is None for d in first_diff),
            "token_match_fraction": matching / total if total else 1.0, "first_mismatch": first_diff}


def compare(config: CompareConfig, *, log_path: str | None = None, python: str | None = None) -> dict:
    """Run both systems; returns the JSON-able comparison (config, agreement, summaries, ratio)."""
    model = resolve_for_vllm(config.model, seed=config.seed)
    prompts, max_tokens = workload(config, model.config.vocab_size)
    need = sum(num_blocks_for(len(p) + m, config.block_size) for p, m in zip(prompts, max_tokens))
    max_len = max(len(p) + m for p, m in zip(prompts, max_tokens))
    engine_config = EngineConfig(1, need, block_size=config.block_size, max_batch_size=config.max_batch_size,
                                 seed=config.seed)
    threads = torch.get_num_threads()
    torch.set_num_threads(config.cpu_threads)
    try:
        local = serve_local(model, prompts, max_tokens, engine_config)
    finally:
        torch.set_num_threads(threads)
    setup = VllmSetup("vllm-m", 1, block_size=config.block_size, blocks_per_engine=need,
                      max_model_len=-(-max_len // config.block_size) * config.block_size,
                      max_num_seqs=config.max_batch_size, cpu_threads=config.cpu_threads, seed=config.seed)
    with tempfile.TemporaryDirectory(prefix="compare-vllm-") as scratch:
        folder = model_folder(config.model, model, scratch)
        run = run_vllm(setup, folder, prompts, max_tokens, python=python, log_path=log_path)
    ours, theirs = summarize(local.served, local.step_end_s, local.step_tokens), run.summary()
    return {
        "config": asdict(config), "vllm_setup": run.setup, "vllm_version": run.vllm_version,
        "model_dtype": str(model.dtype).removeprefix("torch."), "num_kv_blocks": need,
        "prompt_lens": [len(p) for p in prompts], "max_tokens": max_tokens,
        "agreement": agreement(local.token_ids, run.token_ids),
        "local": {"summary": ours.to_dict(), "run_s": local.run_s},
        "vllm": {"summary": theirs.to_dict(), "run_s": run.run_s, "startup_s": run.startup_s},
        "throughput_ratio": ours.output_tok_s / theirs.output_tok_s if theirs.output_tok_s else None,
    }


def format_table(result: dict) -> str:
    ag, ours, theirs = result["agreement"], result["local"]["summary"], result["vllm"]["summary"]
    rows = [("system", "finished", "output tok/s", "mean TTFT ms", "mean TPOT ms", "p99 latency s")]
    for name, s in (("ours (local)", ours), (f"vLLM {result['vllm_version']}", theirs)):
        rows.append((name, f"{s['num_finished']}/{s['num_requests']}", f"{s['output_tok_s']:.1f}",
                     _fmt(s["mean_ttft_ms"]), _fmt(s["mean_tpot_ms"]), _fmt(s["p99_latency_s"], 3)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in rows]
    ratio = result["throughput_ratio"]
    lines.append(f"greedy tokens: {ag['num_identical']}/{ag['num_requests']} requests identical, "
                 f"{100 * ag['token_match_fraction']:.1f}% of positions match (dtype {result['model_dtype']})")
    lines.append(f"throughput ratio ours / vLLM: {'n/a' if ratio is None else f'{ratio:.3f}'}")
    return "\n".join(lines)


def _fmt(value, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"
