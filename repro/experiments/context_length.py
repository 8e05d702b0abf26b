"""context-length (infinite-llm Fig 9 / distkv-llm Fig 7): longest context and largest-batch throughput.

For the six (model, GPUs) rows of distkv-llm Table 2: the longest context each system can hold (KV capacity
of the memory model: one instance for vLLM-M, the pooled cluster for Infinite-LLM, one all-GPU instance for
vLLM-S), then, at 1K, just past vLLM-M's limit and at Infinite-LLM's limit, the decode throughput of the
largest batch each system fits (at most max_batch_size per instance), simulated: every request arrives at
t=0 with the context as prompt minus OUTPUT_LEN; throughput is the sum of the requests' decode rates.
"""
from functools import partial

import pandas as pd

from reference_impl.calibration.links import DEFAULT_LINK
from reference_impl.serving.records import tpot_s
from reference_impl.sim.config import blocks_per_instance, sim_engine, with_engine
from reference_impl.systems.run import simulate
from reference_impl.systems.registry import cluster, system_config
from repro.framework.base import ClaimRow, Experiment, default_run_id
from repro.framework.figures import main_result, plt, save, sns
from repro.framework.params import LINK_HELP, Param, link
from repro.serving.plots import PALETTE
from repro.serving.sweep import run_in_sweep, sweep_params
from repro.serving.tasks import typed
from workloads.request import Request

GPU = "A100-80GB-SXM"
SETTINGS = (("llama2-7b", 2), ("llama2-13b", 4), ("llama2-70b", 8), ("llama2-13b", 8), ("llama2-7b", 16),
            ("llama2-7b", 32))
SYSTEMS = ("infinite-llm", "vllm-m", "vllm-s")
OUTPUT_LEN = 16
SHORT_LEN = 1000
PAST_VLLM_M = 1.05  # "slightly exceeding" vLLM-M's limit
PARAMS = (Param("link", link, DEFAULT_LINK, LINK_HELP), *sweep_params())


def max_context(config) -> int:
    """Longest context one request can have: all blocks it may use, in tokens."""
    engine = config.engine
    blocks = blocks_per_instance(config) * (engine.num_instances if engine.pooling else 1)
    return blocks * engine.block_size


def largest_batch(config, context: int) -> int:
    per_instance_blocks, engine = blocks_per_instance(config), config.engine
    need = -(-context // engine.block_size)
    if engine.pooling:
        return min(engine.max_batch_size * engine.num_instances, per_instance_blocks * engine.num_instances // need)
    return engine.num_instances * min(engine.max_batch_size, per_instance_blocks // need)


def decode_tok_s(config, context: int, batch: int) -> tuple[float | None, int]:
    """Sum over the batch of each request's decode rate (1 / TPOT): the batch's throughput when all decode
    together, robust to prefills that end at different times."""
    requests = [Request(i, 0.0, context - OUTPUT_LEN, OUTPUT_LEN, "context-length") for i in range(batch)]
    done = simulate(config, requests).finished
    if len(done) < batch:
        return None, len(done)
    return sum(1 / tpot_s(r) for r in done), len(done)


def run(params, log) -> dict:
    return run_in_sweep(typed("context-length", PARAMS, params), log, "context-length", on_sweep)


async def on_sweep(params, log, sweep) -> dict:
    params = typed("context-length", PARAMS, params)
    settings = SETTINGS[:2] if params.quick else SETTINGS
    link = params.extra.get("link", DEFAULT_LINK)
    rows, todo = [], []  # todo: (row, label, context, system, batch, decode_tok_s of that batch or None)
    for model, gpus in settings:
        base = cluster(model, GPU, gpus, link=link, engine=sim_engine(seed=params.seed))
        if params.quick:
            base = with_engine(base, max_batch_size=32)
        configs = {s: system_config(s, base) for s in SYSTEMS}
        limits = {s: max_context(c) for s, c in configs.items()}
        lengths = {"short": SHORT_LEN, "past-vllm-m": int(limits["vllm-m"] * PAST_VLLM_M),
                   "infinite-llm-max": limits["infinite-llm"]}
        row = {"model": model, "num_gpus": gpus, "instance_tp": base.tp, "num_instances": base.engine.num_instances,
               "vllm_s_tp": configs["vllm-s"].tp, "vllm_s_pp": configs["vllm-s"].pp, "max_context": limits,
               "points": []}
        rows.append(row)
        for label, context in lengths.items():
            for system, config in configs.items():
                batch = largest_batch(config, context) if context <= limits[system] else 0
                todo.append((row, label, context, system, batch,
                             partial(decode_tok_s, config, context, batch) if batch else None))
    done = await sweep.gather(*(_decode(sweep, job, f"{row['model']} {row['num_gpus']} GPUs {label} {system}",
                                            batch * context) for row, label, context, system, batch, job in todo))
    for (row, label, context, system, batch, _), (tok_s, finished) in zip(todo, done):
        log(f"{row['model']} {row['num_gpus']} GPUs {label:>16} {context:>9} tokens {system:<13} batch {batch:>5} "
            f"{'-' if tok_s is None else f'{tok_s:10.1f}'} tok/s")
        row["points"].append({"length": label, "context": context, "system": system, "batch": batch,
                              "finished": finished, "decode_tok_s": tok_s})
    return {"gpu": GPU, "link": link, "output_len": OUTPUT_LEN, "settings": rows}


async def _decode(sweep, job, label: str, tokens: int) -> tuple:
    return tuple(await sweep.job(job, label, cost=tokens)) if job is not None else (None, 0)


def _tput(row, length, system):
    return next(p["decode_tok_s"] for p in row["points"] if p["length"] == length and p["system"] == system)


def claims(results) -> list[ClaimRow]:
    result = main_result(results)
    out = []
    for row in result["data"]["settings"]:
        where = f"{row['model']}, {row['num_gpus']} GPUs"
        lim = row["max_context"]
        ratio = lim["infinite-llm"] / lim["vllm-m"]
        out.append(ClaimRow("ctx-len-vs-vllm-m", f"max context vs vLLM-M, {where}", "2x-19x", 2.0, 19.0, ratio, "x",
                            "" if 2 <= ratio <= 19 else "capacity ratio = number of instances (memory model)"))
        inf, base = _tput(row, "short", "infinite-llm"), _tput(row, "short", "vllm-s")
        short = inf / base if inf and base else None
        out.append(ClaimRow("short-thpt-vs-vllm-s", f"1K tput vs vLLM-S, {where}", "1.4x-5.3x", 1.4, 5.3, short, "x",
                            "" if short is None or 1.4 <= short <= 5.3 else
                            f"simulated; instances tp={row['instance_tp']}, vLLM-S tp{row['vllm_s_tp']}"
                            f"xpp{row['vllm_s_pp']}, batch cap 256 per instance"))
    return out


def plot(results, figures_dir) -> list[str]:
    settings = main_result(results)["data"]["settings"]
    fig, axes = plt.subplots(1, len(settings), figsize=(3.0 * len(settings), 2.8), squeeze=False)
    for ax, row in zip(axes[0], settings):
        frame = pd.DataFrame(row["points"]).fillna({"decode_tok_s": 0.0})
        frame["ctx"] = frame["context"].map(lambda c: f"{c / 1000:.0f}K")
        sns.barplot(frame, x="ctx", y="decode_tok_s", hue="system", palette=PALETTE, ax=ax,
                    legend=ax is axes[0][0])
        ax.set_yscale("log")
        ax.set_title(f"{row['model']}, {row['num_gpus']} GPUs", fontsize=8)
        ax.set_xlabel("context length")
        ax.set_ylabel("decode tokens/s")
    # distkv-llm Fig 7 is the same benchmark (same models, GPUs and ranges): one drawing, both names
    return save(fig, figures_dir, "infinite-llm-fig9", close=False) + save(fig, figures_dir, "distkv-llm-fig7")


EXPERIMENT = Experiment("context-length", ("infinite-llm Fig 9", "distkv-llm Fig 7"), "context_length.schema.json",
                        run, default_run_id, plot=plot, claims=claims, params=PARAMS, on_sweep=on_sweep)
