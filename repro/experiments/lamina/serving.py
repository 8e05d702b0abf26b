"""Fig 13 re-derived from serving runs (`--param serving`, on for full runs): for each model and context the
arithmetic's best vLLM and best Lamina cluster (one instance each, its tp and, for Lamina, its memory devices; the
batch limit MAX_BATCH for both) serve a trace whose requests decode at the figure's context on average (prompt
context/2 tokens, output context tokens: the KV grows from context/2 to 3/2 context), Poisson arrivals. Max
throughput at the plateau by repro/serving/curves.py's method (measured saturation, rate grid, plateau climb), per
dollar at lamina Table 1's prices (reference_impl/systems/lamina/cluster.py price_usd).

Beside it, what takes the arithmetic's number down to the served one, each step priced on the same cost model:
`pipeline_tok_s` is the arithmetic's batch at the serving backend's step (micro-batches each loading the weights,
the pipeline's fill and drain: step_cost.py), `with_prefill_tok_s` adds each request's prefill (and, for Lamina,
its KV move) on the same devices, one prompt a step; the rest is the served batch (admission by the tokens so far,
preemption as the KV grows, queueing at the rate), read from the plateau point's peak batch and preemptions.
"""
import time
from dataclasses import replace
from functools import partial

import numpy as np

from reference_impl.serving.points import ServingPoint
from reference_impl.sim.config import SimConfig, perf_model, sim_engine
from reference_impl.systems.run import simulate
from reference_impl.systems.lamina.cluster import LaminaKnobs, knobs_of
from reference_impl.systems.pricing import price_usd
from reference_impl.systems.lamina.hardware import memory_attention_bytes_per_s
from reference_impl.systems.lamina.step_cost import MAX_BATCH, StepPricer, kv_move_s, prefill_s
from reference_impl.systems.registry import system_config
from repro.experiments.lamina.arithmetic import GPU, Config, best_lamina, best_vllm
from repro.serving.curves import CurveGroup, curves
from workloads.arrivals import arrival_times_s
from workloads.request import Request

MIN_REQUESTS = 100
BATCHES_PER_POINT = 3  # a point serves this many of the arithmetic's batch, so that its batch can fill
SYSTEMS = {"vLLM": "vllm-m", "Lamina": "lamina"}


def fig13_requests(context: int, num_requests: int, rate_per_s: float, seed: int) -> list[Request]:
    arrivals_s = arrival_times_s(num_requests, rate_per_s, np.random.default_rng(seed))
    return [Request(i, t, context // 2, context, f"fixed:fig13-{context}") for i, t in enumerate(arrivals_s.tolist())]


def serving_base(pick: Config) -> SimConfig:
    """The arithmetic's pick as one serving instance (the base its design's system_config reshapes)."""
    base = SimConfig(model=pick.model, gpu=GPU, tp=pick.tp, engine=sim_engine(num_instances=1,
                                                                              max_batch_size=MAX_BATCH))
    if pick.system == "Lamina":
        base = replace(base, design_knobs=LaminaKnobs(memory_devices=pick.memory_devices))
    return base


def run_with_counters(task) -> dict:
    """PointTask.runner: run_point's record plus the design's counters."""
    start = time.perf_counter()
    result = simulate(system_config(task.system, task.base), task.requests, steady_only=task.steady_only)
    point = ServingPoint.of_result(task.system, task.rate_per_s, result, wall_s=time.perf_counter() - start,
                                   seed=task.seed)
    return {**point.to_dict(), "counters": dict(result.design_counters)}


def groups(models, contexts) -> list[tuple[Config, CurveGroup]]:
    out = []
    for model in models:
        for context in contexts:
            for pick in (best_vllm(model, context), best_lamina(model, context)):
                if pick is None:
                    continue
                n = max(MIN_REQUESTS, BATCHES_PER_POINT * pick.batch)
                info = {"model": model, "context": context, "system": pick.system, "baseline": SYSTEMS[pick.system],
                        "num_requests": n}
                base = serving_base(pick)
                # the first probe at the rate the step arithmetic with prefill sustains (the cost model's generic
                # estimate reads the GPUs' own memory, not the memory devices', and starts Lamina far too low)
                start = explain(pick, system_config(SYSTEMS[pick.system], base))["with_prefill_tok_s"] / context
                g = CurveGroup(info, base, partial(fig13_requests, context, n), (SYSTEMS[pick.system],),
                               f"fig13 {model} ctx {context} {pick.system}", runner=run_with_counters,
                               start_rate_per_s=start)
                out.append((pick, g))
    return out


def explain(pick: Config, config: SimConfig) -> dict:
    """The arithmetic's tokens/s, then at the serving step's price, then with each request's prefill."""
    model = perf_model(config)
    output, prompt = pick.context, pick.context // 2
    step_s = pick.step_s
    per_request_s = prefill_s(model, [prompt])
    if pick.system == "Lamina":
        knobs = knobs_of(config)
        pricer = StepPricer(model, knobs.nic_gb_s_per_gpu,
                            memory_attention_bytes_per_s(config.gpu, knobs.memory_devices), knobs.micro_batches)
        step_s = pricer.decode(pick.batch, pick.batch * pick.context).duration_s
        per_request_s += kv_move_s(pick.model, prompt, pick.tp, knobs.nic_gb_s_per_gpu)
    pipeline = pick.batch / step_s
    return {"pipeline_tok_s": pipeline, "with_prefill_tok_s": output / (per_request_s + output / pipeline),
            "prefill_s_per_request": per_request_s}


async def serving_rows(models, contexts, seed: int, log, sweep) -> list[dict]:
    """One row per model, context and system: the served plateau per dollar beside the arithmetic's."""
    todo = groups(models, contexts)
    records = await curves([g for _, g in todo], (seed,), sweep)
    rows = []
    for (pick, g), record in zip(todo, records):
        (served,) = record["max_tput_tok_s"][g.systems[0]]
        top = max(record["points"], key=lambda p: p["steady_output_tok_s"])
        config = system_config(g.systems[0], g.base)
        cost = price_usd(config)
        rows.append({"model": pick.model, "context": pick.context, "system": pick.system, "tp": pick.tp,
                     "memory_devices": pick.memory_devices, "cost_usd": cost, "served_tok_s": served,
                     "served_tok_s_per_kusd": 1e3 * served / cost, "arithmetic_tok_s": pick.tok_s,
                     "arithmetic_batch": pick.batch, **explain(pick, config), "num_requests": g.info["num_requests"],
                     "plateau_rate_per_s": top["rate_per_s"], "plateau_peak_batch": top["peak_batch_size"],
                     "plateau_preemptions": top["num_preemptions"], "plateau_counters": top.get("counters", {}),
                     "rates_per_s": sorted({p["rate_per_s"] for p in record["points"]})})
    return rows
