"""lamina (lamina Fig 13): decode throughput per hardware dollar, attention offloading vs vLLM, in two parts: the
cost-model arithmetic at the largest batch (arithmetic.py, the paper's own "estimated throughput per dollar"), and
the same clusters serving a trace, max throughput at the plateau (serving.py; `--param serving`, on for full
runs). Prices and device specs: lamina Table 1 (reference_impl/systems/lamina/devices.json). LLaMA2-70B stands in
for the paper's LLaMA-33B: the calibration has no 33B profile, and 70B's GQA keeps 8x less KV per token, which
favours vLLM.
"""
from dataclasses import replace

import pandas as pd

from reference_impl.systems.lamina.hardware import attention_efficiency
from reference_impl.systems.lamina.step_cost import MAX_BATCH
from repro.experiments.lamina.arithmetic import (FULL_CONTEXTS, GPU, MODELS, QUICK_CONTEXTS, SAME_GPUS, best_lamina,
                                                 best_vllm, devices_record, vllm_config)
from repro.experiments.lamina.serving import serving_rows
from repro.framework.base import ClaimRow, Experiment, default_run_id
from repro.framework.figures import main_result, new_figure, save, sns
from repro.framework.params import Param, boolean
from repro.serving.sweep import run_in_sweep, sweep_params

PARAMS = (Param("serving", boolean, None, "also serve each (model, context)'s clusters on a trace and read max "
                "throughput at the plateau (default: on for full runs, off with --quick)"), *sweep_params())


def run(params, log) -> dict:
    return run_in_sweep(params, log, "lamina", on_sweep)


async def on_sweep(params, log, sweep) -> dict:
    contexts = QUICK_CONTEXTS if params.quick else FULL_CONTEXTS
    rows = []
    for model in MODELS:
        for context in contexts:
            picks = [best_vllm(model, context), best_lamina(model, context), best_lamina(model, context, False)]
            if picks[1] is not None:  # vLLM on Lamina's compute GPUs alone: the paper's Fig 12 batch comparison
                same = vllm_config(model, context, picks[1].tp)
                picks.append(same and replace(same, system=SAME_GPUS))
            for c in picks:
                if c is not None:
                    rows.append(c.to_dict())
                    log(f"{model} ctx {context:6d} {c.system:<20} tp {c.tp} + {c.memory_devices:2d} mem  batch "
                        f"{c.batch:5d}  {c.tok_s:8.0f} tok/s  {1e3 * c.tok_s / c.cost_usd:7.1f} tok/s per k$")
    data = {"gpu": GPU, "attention_efficiency": attention_efficiency(GPU), "max_batch": MAX_BATCH,
            "devices": devices_record(), "rows": rows}
    serving = params.extra.get("serving")
    if serving or (serving is None and not params.quick):
        data["serving"] = await serving_rows(MODELS, contexts, params.seed, log, sweep)
    return data


def ratios(data: dict, system: str = "Lamina") -> list[dict]:
    """Per (model, context): tokens/s per dollar against the best vLLM; batch and throughput at max batch
    against vLLM on the same compute GPUs (None where the model does not fit them alone)."""
    out = []
    for model in MODELS:
        for context in sorted({r["context"] for r in data["rows"]}):
            pick = {r["system"]: r for r in data["rows"] if r["model"] == model and r["context"] == context}
            if system in pick and "vLLM" in pick:
                a, b, same = pick[system], pick["vLLM"], pick.get(SAME_GPUS)
                out.append({"model": model, "context": context, "per_dollar": a["tok_s_per_kusd"] / b["tok_s_per_kusd"],
                            "batch": same and a["batch"] / same["batch"], "tput": same and a["tok_s"] / same["tok_s"]})
    return out


def served_ratios(data: dict) -> list[float]:
    """Per (model, context) served: Lamina's plateau tokens/s per dollar over vLLM's."""
    by = {(r["model"], r["context"], r["system"]): r["served_tok_s_per_kusd"] for r in data.get("serving", [])}
    return [by[(m, c, "Lamina")] / by[(m, c, "vLLM")] for m, c, s in by
            if s == "Lamina" and by.get((m, c, "vLLM"), 0) > 0]


def claims(results) -> list[ClaimRow]:
    data = main_result(results)["data"]
    r = ratios(data)
    note = ("cost model; A100 compute + RTX 3090 memory devices priced as lamina Table 1; LLaMA2-13B and "
            f"LLaMA2-70B (GQA) at {min(x['context'] for x in r)}-{max(x['context'] for x in r)} tokens; "
            f"batch cap {data['max_batch']}")
    same = "against vLLM on Lamina's compute GPUs alone, where the model fits them"
    served = ("served: max throughput at the plateau per dollar on a trace of the figure's contexts (prefill, KV "
              "moves, admission and preemption included), the arithmetic's clusters")
    values = {**{k: [x[k] for x in r if x[k] is not None] for k in ("per_dollar", "batch", "tput")},
              "served": served_ratios(data)}
    notes = {"per_dollar": note, "batch": same, "tput": same, "served": served}
    rows = []
    for key, metric, paper, low, high in (("per_dollar", "tput per $ vs vLLM", "1.48x-12.1x", 1.48, 12.1),
                                          ("batch", "max batch vs vLLM", "10.7x-64x", 10.7, 64.0),
                                          ("tput", "tput at max batch vs vLLM", "1.75x-20.5x", 1.75, 20.5),
                                          ("served", "served tput per $ vs vLLM", "1.48x-12.1x", 1.48, 12.1)):
        if not values[key] and key == "served":
            continue
        for bound, pick in (("min", min), ("max", max)):
            rows.append(ClaimRow("lamina-thpt-per-dollar", f"{metric} ({bound} over models, contexts)", paper,
                                 low, high, pick(values[key]) if values[key] else None, "x", notes[key]))
    return rows


def plot(results, figures_dir) -> list[str]:
    data = main_result(results)["data"]
    frame = pd.DataFrame(data["rows"])
    written = _bars(frame, "tok_s_per_kusd", figures_dir, "lamina-fig13", "A100 + RTX 3090 memory devices")
    if data.get("serving"):
        served = pd.DataFrame(data["serving"])
        arithmetic = served.assign(how="arithmetic", tok_s_per_kusd=1e3 * served["arithmetic_tok_s"] / served["cost_usd"])
        frame = pd.concat([arithmetic, served.assign(how="served", tok_s_per_kusd=served["served_tok_s_per_kusd"])])
        frame["system"] = frame["system"] + ", " + frame["how"]
        written += _bars(frame, "tok_s_per_kusd", figures_dir, "lamina-fig13-serving", "served at the plateau")
    return written


def _bars(frame, y: str, figures_dir, name: str, title: str) -> list[str]:
    frame = frame.assign(ctx=frame["context"].map(lambda c: f"{c / 1024:g}K"))
    fig, axes = new_figure(len(MODELS), width_in=4.2, height_in=3.0)
    for ax, model in zip(axes, MODELS):
        sns.barplot(frame[frame["model"] == model], x="ctx", y=y, hue="system", ax=ax, legend=ax is axes[0])
        ax.set(title=f"{model}, {title}", xlabel="context length", ylabel="tokens/s per $1000 of hardware")
    return save(fig, figures_dir, name)


EXPERIMENT = Experiment("lamina", ("lamina Fig 13",), "lamina.schema.json", run, default_run_id, plot=plot,
                        claims=claims, params=PARAMS, on_sweep=on_sweep)
