"""kv-move: infinite-llm Fig 12(a), instance throughput while moving KV every decode step, batch fixed.

Modelled (A100, LLaMA2-7B, calibrated): a step moves `tokens` of KV to another instance over the link
while it computes; with the move overlapped a step takes max(compute, transfer). Three links: the
calibration's measured NVLink and inter-node send/recv, and the paper's printed 125 MB/s Ethernet.
Measured (local backend, a small LLaMA on CPU): two instances of the engine, one decoding a fixed batch
while its rManager always has a pending move of one request's rBlocks to the other instance; the
engine's own move path copies the chunk each step. Time per step from the engine loop.
"""
import statistics
import time

import numpy as np
import pandas as pd
import torch

from reference_impl.backends.local import LocalBackend
from reference_impl.calibration import CalibratedPerfModel
from reference_impl.calibration.links import INTER_NODE, INTRA_NODE
from reference_impl.calibration.perf_model import InstanceLoad, step_time_s
from reference_impl.control.engine import Engine, EngineConfig
from reference_impl.control.sequence import Sequence
from reference_impl.model.llama import ModelConfig, random_model
from repro.framework.base import ClaimRow, Experiment, default_run_id
from repro.framework.figures import main_result, new_figure, save, sns
from repro.framework.params import Param, positive_int

MOVE_TOKENS = [0, 8, 16, 32, 64]
LINKS = [INTRA_NODE, INTER_NODE, "0.125"]
LOCAL_MODEL = dict(vocab_size=512, hidden_size=512, intermediate_size=1376, num_layers=4, num_heads=8, num_kv_heads=8)
BATCH_SIZE, CONTEXT_LEN = 64, 1000
PARAMS = (Param("batch_size", positive_int, BATCH_SIZE, "requests decoding together in the modelled A100 instance"),
          Param("context_len", positive_int, CONTEXT_LEN, "tokens of KV per request in the modelled instance"))


def modelled(batch_size: int, context_len: int) -> list[dict]:
    rows = []
    for link in LINKS:
        m = CalibratedPerfModel.for_setting(model="llama2-7b", gpu="A100-80GB-SXM", link=link)
        compute_s = step_time_s(m, InstanceLoad(batch_size, batch_size * context_len))
        for tokens in MOVE_TOKENS:
            step = max(compute_s, m.kv_transfer_s(tokens))
            rows.append({"link": m.link.name, "move_tokens": tokens, "step_ms": step * 1e3,
                         "throughput_tok_s": batch_size / step})
    return rows


def measure_local(batch_size: int, prompt_len: int, steps_per_setting: int, seed: int) -> list[dict]:
    """Median decode step time of the local engine per tokens-moved setting. The settings take turns
    step by step in one run, and a step's time is this process's CPU time on one thread, so other work
    on a shared machine does not count."""
    block = 8
    new_tokens = steps_per_setting * len(MOVE_TOKENS) + 1
    blocks = batch_size * (prompt_len + new_tokens) // block + batch_size
    config = EngineConfig(num_instances=2, blocks_per_instance=blocks, block_size=block, max_batch_size=batch_size,
                          pooling=False, seed=seed)
    model = random_model(ModelConfig(**LOCAL_MODEL), seed=seed)
    engine = Engine(config, LocalBackend(model, config))
    rng = np.random.default_rng(seed)
    inst, rm = engine.instances[0], engine.rmanagers[0]
    for i in range(batch_size):
        inst.scheduler.add(Sequence(i, rng.integers(0, LOCAL_MODEL["vocab_size"], prompt_len).tolist(), new_tokens, None))
    engine.step()  # prefill
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    times = {tokens: [] for tokens in MOVE_TOKENS}
    for i in range(steps_per_setting * len(MOVE_TOKENS)):
        tokens = MOVE_TOKENS[i % len(MOVE_TOKENS)]
        if not rm.moves:  # keep one request's rBlocks on their way to the other instance
            req = max(rm.tables, key=lambda r: sum(b.inst_id == 0 for b in rm.tables[r]))
            rm.move_kvcache(req, 10**6, 1)
        inst.move_chunk_blocks = tokens // block
        t0 = time.process_time()
        engine.step()
        times[tokens].append(time.process_time() - t0)
    torch.set_num_threads(threads)
    return [{"move_tokens": tokens, "step_ms": statistics.median(ts) * 1e3,
             "throughput_tok_s": batch_size / statistics.median(ts), "steps": len(ts)} for tokens, ts in times.items()]


def run(params, log) -> dict:
    batch, context = params.extra.get("batch_size", BATCH_SIZE), params.extra.get("context_len", CONTEXT_LEN)
    local_batch, prompt, steps = (2, 32, 2) if params.quick else (8, 256, 20)
    log(f"kv-move: local backend, batch {local_batch}, {steps} steps for each of {MOVE_TOKENS} tokens moved")
    measured = measure_local(local_batch, prompt, steps, params.seed)
    return {"a100_model": modelled(batch, context), "batch_size": batch, "context_len": context,
            "measured": measured, "local": {"batch_size": local_batch, "prompt_len": prompt,
                                            "steps_per_setting": steps, "model": LOCAL_MODEL}}


def _loss_pct(rows: list[dict], tokens: int) -> float:
    df = pd.DataFrame(rows).set_index("move_tokens")["throughput_tok_s"]
    return (1 - df[tokens] / df[0]) * 100


def claims(results: list[dict]) -> list[ClaimRow]:
    data = main_result(results)["data"]
    out = []
    for link, rows in pd.DataFrame(data["a100_model"]).groupby("link", sort=False):
        for tokens, paper, lo, hi in ((32, "8.6%", 8.6, 8.6), (16, "0%", 0, 0)):
            out.append(ClaimRow("kv-move-overhead", f"throughput loss at {tokens} tok/step, A100 model, {link}", paper,
                                lo, hi, round(_loss_pct(rows.to_dict("records"), tokens), 2), "%"))
    for tokens, paper, lo, hi in ((32, "8.6%", 8.6, 8.6), (16, "0%", 0, 0)):
        out.append(ClaimRow("kv-move-overhead", f"throughput loss at {tokens} tok/step, measured local", paper, lo, hi,
                            round(_loss_pct(data["measured"], tokens), 2), "%",
                            "CPU, one thread, process CPU time: the copy is not overlapped; "
                            "KV of the small model is 16 KB a token"))
    return out


def plot(results: list[dict], figures_dir: str) -> list[str]:
    data = main_result(results)["data"]
    fig, (ax, ax_local) = new_figure(2)
    sns.lineplot(pd.DataFrame(data["a100_model"]), x="move_tokens", y="throughput_tok_s", hue="link", marker="o", ax=ax)
    ax.set(xlabel="KV tokens moved per decode step", ylabel="instance throughput (tok/s)",
           title=f"A100 LLaMA2-7B model, batch {data['batch_size']} x {data['context_len']} tokens")
    sns.barplot(pd.DataFrame(data["measured"]), x="move_tokens", y="throughput_tok_s", ax=ax_local, color="C0")
    ax_local.set(xlabel="KV tokens moved per decode step", ylabel="instance throughput (tok/s)",
                 title=f"measured: local backend on CPU, batch {data['local']['batch_size']}")
    return save(fig, figures_dir, "infinite-llm-fig12")


EXPERIMENT = Experiment("kv-move", ("infinite-llm Fig 12a",), "kv_move.schema.json", run, default_run_id,
                        plot=plot, claims=claims, backends=("local", "sim"), params=PARAMS)
