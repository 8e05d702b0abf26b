"""dgfm (distkv-llm Fig 10): cluster throughput over time with and without DGFM, and the debt cycles left.

Four LLaMA2-13B TP2 instances on one 8-GPU A100 node (NVLink between instances), requests of 1 to 480K tokens.
Debt cycles need an instance that borrows and lends at once: distkv-llm allows it, infinite-llm 5.2 forbids it
(and so needs no DGFM). The arms serve the same seeded requests on the simulated cluster: distkv-llm's protocol
with DGFM and without, and infinite-llm's exclusive roles as a third line. The cluster
starts full and stays full: a first wave arrives at t=0 and a Poisson stream follows, so requests finish and
new ones take the freed rBlocks wherever they are, and debts between instances pile up and form cycles.
Prompts arrive prefilled (`simulate(prefill_elsewhere=True)`): a 480K-token prefill alone takes minutes on this
cluster, so without it nothing would churn within the window; prefill time is excluded from both arms alike.
At every gManager round (1 s) the run records the debt cycles DGFM could cancel (`dgfm.count_cycles`), the
share of rBlocks on their request's home instance, and the (request, creditor) pairs that remote
MicroAttention serves.
"""
from functools import partial

import numpy as np
import pandas as pd

from reference_impl.control.dgfm import count_cycles, debt_graph
from reference_impl.sim.config import SimConfig, blocks_per_instance, sim_engine, with_engine
from reference_impl.systems.run import simulate
from repro.framework.base import ClaimRow, Experiment, default_run_id
from repro.framework.figures import main_result, new_figure, save, sns
from repro.framework.params import Param, positive_float, positive_int
from repro.serving.sweep import run_in_sweep, sweep_params
from repro.serving.tasks import typed
from workloads.request import Request

SETTING = SimConfig(model="llama2-13b", gpu="A100-80GB-SXM", tp=2, link="intra-node",
                    engine=sim_engine(num_instances=4))
FULL = dict(duration_s=300.0, bin_s=10.0, seeds=5)
QUICK = dict(duration_s=30.0, bin_s=10.0, seeds=1)
# (label, EngineConfig.dgfm, EngineConfig.exclusive_roles): distkv-llm's protocol with and without DGFM, and
# infinite-llm 5.2's rule (a debtor never lends), under which no debt cycle can form.
PARAMS = (Param("duration_s", positive_float, None, f"simulated seconds per arm (default: {FULL['duration_s']:g}; "
                                                     f"{QUICK['duration_s']:g} with --quick)"),
          Param("seeds", positive_int, None, f"seeds, from --seed up (default: {FULL['seeds']}; {QUICK['seeds']} with "
                                             "--quick)"),
          *sweep_params())
ARMS = (("DGFM", True, False), ("no DGFM", False, False), ("exclusive roles", True, True))
MAX_TOKENS = 480_000
OUTPUT_RANGE = (32, 512)  # decode tokens per request, uniform
FIRST_WAVE_FILL = 1.5  # the t=0 wave holds this many times the cluster's KV capacity (the rest queues)
STREAM_RATE_PER_S = 1.0  # then Poisson arrivals; above the completion rate, so the queue never empties


def make_requests(capacity_tokens: int, duration_s: float, rng: np.random.Generator) -> list[Request]:
    """Lengths log-uniform over 1..MAX_TOKENS (prompt + output), a first wave then a Poisson stream."""
    requests, total, t = [], 0, 0.0
    while total < FIRST_WAVE_FILL * capacity_tokens or t < duration_s:
        if total >= FIRST_WAVE_FILL * capacity_tokens:
            t += rng.exponential(1.0 / STREAM_RATE_PER_S)
        output = int(rng.integers(OUTPUT_RANGE[0], OUTPUT_RANGE[1] + 1))
        length = int(np.exp(rng.uniform(0.0, np.log(MAX_TOKENS))))
        prompt = max(1, length - output)
        requests.append(Request(len(requests), t, prompt, output, "generated:dgfm"))
        total += prompt + output
    return requests


def placement_stats(engine) -> dict:
    """Debt cycles, locality and remote pieces of the engine's current rBlock placement."""
    placements, homes = {}, {}
    local = total = 0
    for rm in engine.rmanagers.values():
        for req_id, table in rm.tables.items():
            where: dict[int, int] = {}
            for block in table:
                where[block.inst_id] = where.get(block.inst_id, 0) + 1
            placements[req_id], homes[req_id] = where, rm.inst_id
            local += where.get(rm.inst_id, 0)
            total += len(table)
    graph = debt_graph(placements, homes)
    return {"debt_cycles": count_cycles(graph, engine.config.gmanager.dgfm_min_blocks),
            "local_share": local / total if total else 1.0,
            "remote_pairs": sum(1 for r, where in placements.items() for i in where if i != homes[r]),
            "lent_blocks": sum(n for cs in graph.values() for n in cs.values()),
            "swaps": engine.num_swaps}


def run_arm(label: str, dgfm: bool, exclusive_roles: bool, requests, duration_s: float, bin_s: float,
            seed: int) -> dict:
    config = with_engine(SETTING, dgfm=dgfm, exclusive_roles=exclusive_roles, seed=seed)
    rounds = []
    result = simulate(config, requests, max_sim_s=duration_s, prefill_elsewhere=True,
                      on_round=lambda now_s, engine: rounds.append({"t_s": now_s, **placement_stats(engine)}))
    starts, tok_s = result.throughput_over_time(bin_s)
    keep = starts + bin_s <= duration_s + 1e-9
    return {"arm": label, "dgfm": dgfm, "exclusive_roles": exclusive_roles, "seed": seed,
            "bins": [{"t_s": float(t), "output_tok_s": float(v)} for t, v in zip(starts[keep], tok_s[keep])],
            "rounds": rounds, "num_finished": result.count("finished"), "num_moved_blocks": result.num_moved_blocks}


def last_third_tok_s(arm: dict) -> float:
    bins = arm["bins"][-max(1, len(arm["bins"]) // 3):]
    return float(np.mean([b["output_tok_s"] for b in bins]))


def seeded_arm(label: str, dgfm: bool, exclusive_roles: bool, capacity_tokens: int, duration_s: float,
               bin_s: float, seed: int) -> dict:
    """run_arm on the requests of `seed` (made where the arm runs)."""
    requests = make_requests(capacity_tokens, duration_s, np.random.default_rng(seed))
    return run_arm(label, dgfm, exclusive_roles, requests, duration_s, bin_s, seed)


def run(params, log) -> dict:
    return run_in_sweep(typed("dgfm", PARAMS, params), log, "dgfm", on_sweep)


async def on_sweep(params, log, sweep) -> dict:
    params = typed("dgfm", PARAMS, params)
    size = QUICK if params.quick else FULL
    duration_s = params.extra.get("duration_s") or size["duration_s"]
    seeds = range(params.seed, params.seed + (params.extra.get("seeds") or size["seeds"]))
    capacity = blocks_per_instance(SETTING) * SETTING.engine.block_size * SETTING.engine.num_instances
    jobs = [(seed, label, partial(seeded_arm, label, dgfm, exclusive, capacity, duration_s, size["bin_s"], seed))
            for seed in seeds for label, dgfm, exclusive in ARMS]
    arms = await sweep.gather(*(sweep.job(job, f"seed {seed} {label}") for seed, label, job in jobs))
    for arm in arms:
        end = arm["rounds"][-1] if arm["rounds"] else {"swaps": 0, "debt_cycles": 0}
        log(f"seed {arm['seed']} {arm['arm']:<16}: {arm['num_finished']:3d} finished, {end['swaps']:3d} swaps, "
            f"max debt cycles {max((r['debt_cycles'] for r in arm['rounds']), default=0)}, "
            f"last third {last_third_tok_s(arm):6.1f} tok/s")
    num_requests = sum(len(make_requests(capacity, duration_s, np.random.default_rng(seed))) for seed in seeds)
    setting = {"model": SETTING.model, "gpu": SETTING.gpu, "num_instances": SETTING.engine.num_instances,
               "tp": SETTING.tp, "link": SETTING.link}
    return {"setting": setting, "capacity_tokens": capacity, "num_requests": num_requests,
            "duration_s": duration_s, "bin_s": size["bin_s"], "arms": arms}


def _by_arm(data: dict) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for arm in data["arms"]:
        out.setdefault(arm["arm"], []).append(arm)
    return out


def claims(results) -> list[ClaimRow]:
    result = main_result(results)
    arms = _by_arm(result["data"])
    on = [last_third_tok_s(a) for a in arms["DGFM"]]
    off = [last_third_tok_s(a) for a in arms["no DGFM"]]
    ratios = [a / b for a, b in zip(on, off) if b > 0]
    swaps = [a["rounds"][-1]["swaps"] for a in arms["DGFM"] if a["rounds"]]
    cycles = [max((r["debt_cycles"] for r in a["rounds"]), default=0) for a in arms["no DGFM"]]
    note = (f"simulated, {len(ratios)} seeds of {result['data']['duration_s']:.0f} s: per-seed ratio "
            f"{min(ratios):.2f}x-{max(ratios):.2f}x; DGFM made {min(swaps)}-{max(swaps)} swaps, without it at most "
            f"{max(cycles)} debt cycles stood at once; prompts prefilled elsewhere") if ratios else "no throughput"
    return [ClaimRow("dgfm", "tput with / without DGFM, last third of the run (mean over seeds)",
                     "higher with DGFM", None, None, float(np.mean(ratios)) if ratios else None, "x", note)]


def plot(results, figures_dir) -> list[str]:
    data = main_result(results)["data"]
    bins = pd.DataFrame([{"arm": a["arm"], "seed": a["seed"], **b} for a in data["arms"] for b in a["bins"]])
    rounds = pd.DataFrame([{"arm": a["arm"], "seed": a["seed"], **r} for a in data["arms"] for r in a["rounds"]])
    fig, (tput, cycles, local) = new_figure(3, width_in=4.0, height_in=3.0)
    sns.lineplot(bins, x="t_s", y="output_tok_s", hue="arm", errorbar=None, ax=tput)
    tput.set(xlabel="time (s)", ylabel="throughput (tokens/s)", title="cluster output, mean over seeds")
    debt = rounds[rounds["arm"] == "no DGFM"]
    sns.lineplot(debt, x="t_s", y="debt_cycles", errorbar=None, ax=cycles, label="debt cycles (no DGFM)")
    swaps = rounds[rounds["arm"] == "DGFM"]
    sns.lineplot(swaps, x="t_s", y="swaps", errorbar=None, ax=cycles, label="DGFM swaps so far")
    cycles.set(xlabel="time (s)", ylabel="count", title="debt cycles and swaps")
    sns.lineplot(rounds, x="t_s", y="local_share", hue="arm", errorbar=None, ax=local, legend=False)
    local.set(xlabel="time (s)", ylabel="share of rBlocks at home", title="KV locality", ylim=(0, 1.05))
    return save(fig, figures_dir, "distkv-llm-fig10")


EXPERIMENT = Experiment("dgfm", ("distkv-llm Fig 10",), "dgfm.schema.json", run, default_run_id, plot=plot,
                        claims=claims, params=PARAMS, on_sweep=on_sweep)
