"""sensitivity: each Fig 10 group's max-throughput ratio (Infinite-LLM over its baseline) against the inputs
the reproduction is least sure of, changed for every system alike, one at a time from the calibrated default:

- prefill attention rate (A100 TFLOP/s): DistServe's fitted quadratic term 43.5 (the old calibration), the
  project's H100 SDPA measurement scaled by datasheet peaks 144, FlashAttention-2's published A100 rate 190
  (the calibration), its upper end 230;
- inter-instance link: NVLink (intra-node), Vidur's measured inter-node send/recv (the default), the paper's
  125 MB/s;
- output length of long requests (prompt at or above the group's 90th percentile): x0.5, x1, x2;
- batch cap (max_batch_size): 64, 256 (default), 1024;
- chunked prefill on (`chunked_prefill_tokens`=512) / off, when the simulator has that option (issue 13);
- a control-plane call on a peer that waits for its reply (`peer_call_s`, charged to the caller's step): none
  (the A100 fits have no measurement), 3.4 ms (this project's Ray engine, 2 instances).

Max throughput per arm is the plateau of the probes of curves.find_saturation, extended by the rule of
repro/serving/plateau.py: on the first seed each system serves the requests at probe rates up to past its
saturation; while its two highest rates disagree by more than 5% it serves twice the top rate again (at most
plateau.MAX_EXTENSIONS times, as the curves); the highest steady-state output rate of those points is its max
throughput. Each later seed starts where the first read its plateau (its top two rates and the rate of its
highest point; the curves likewise search saturation on the first seed only) and goes on by the same rule.
Cheaper than a whole curve (two to four points per system and seed instead of >= 12); the `default` arm is the
e2e configuration, so its ratio checks this shortcut against the e2e curves (as many requests a probe as an e2e
point). `probe_ratio` is the first seed's ratio of the probes alone (the reading before the plateau rule).
Only each point's steady-state rate is read, so every simulation stops at the end of its steady-state window
(PointTask.steady_only).

Runs that cannot differ run once: the default arms of the six inputs are one configuration; vLLM-M and vLLM-S
(no pooling) send nothing over the link and call no peer, so their climb is the same under every link and
peer-call arm; and a batch-cap arm reads the default cap's point at the same rate and seed wherever that run's
batch stayed below both caps (on long-request groups memory binds long before the cap), and simulates the rest.
"""
import asyncio
import dataclasses
from functools import partial

import numpy as np

from repro.framework.base import ClaimRow, Experiment, RunParams, default_run_id
from repro.experiments.e2e import GPU, PAPER, curve_groups, sizes
from repro.experiments.sensitivity.plot import plot_sensitivity
from repro.framework.figures import main_result
from repro.framework.params import Param, int_list
from repro.serving.sweep import run_in_sweep, sweep_params
from repro.serving.tasks import PointTask, run_point, typed
from repro.serving.curves import CurveGroup, find_saturation, probe_spec
from repro.serving.plateau import Climb, climbs_to_plateau, max_tput_tok_s, reaches_plateau
from reference_impl.calibration.specs import gpu_entry, model_spec
from reference_impl.errors import InputError
from reference_impl.sim import config as sim_config
from reference_impl.calibration.links import DEFAULT_LINK, INTER_NODE, INTRA_NODE
from reference_impl.sim.config import SIM_ENGINE, engine_costs, with_engine
from reference_impl.systems.registry import as_simulated, system_config

CALIBRATED_PREFILL_TFLOPS = gpu_entry(GPU)["prefill_attn_tflops"]  # specs.json (FlashAttention-2's published rate)
LONG_QUANTILE = 0.9
CHUNK_TOKENS = 512
ARMS = {  # input -> ((label, value), ...); the default value of each input is one of its arms
    "prefill_tflops": ((43.5, "DistServe fit"), (144, "H100 measured x 312/989"),
                       (CALIBRATED_PREFILL_TFLOPS, "FlashAttention-2 A100"), (230, "FlashAttention-2 A100, high")),
    "link": ((INTRA_NODE, "NVLink"), (INTER_NODE, "measured inter-node"), ("0.125", "paper's 125 MB/s")),
    "long_output_scale": ((0.5, "x0.5"), (1.0, "x1"), (2.0, "x2")),
    "max_batch_size": ((64, "64"), (256, "256"), (1024, "1024")),
    "chunked_prefill_tokens": ((None, "off"), (CHUNK_TOKENS, f"{CHUNK_TOKENS}-token chunks")),
    # the A100/H100 fits have no measurement of a control-plane call; 3.4 ms is the Ray engine's on this project's
    # 2-core machine (docs/ray.md: device-time 20 ms steps, 2 instances, quiet machine). A 7.3 ms arm (4 instances)
    # moved the groups' medians as much (0.90x, 0.96x) at 1.5x this arm's cost, and is not run
    "peer_call_ms": ((0.0, "none (A100: not measured)"), (3.4, "Ray engine, 2 instances")),
}
DEFAULTS = {"prefill_tflops": CALIBRATED_PREFILL_TFLOPS, "link": DEFAULT_LINK, "long_output_scale": 1.0,
            "max_batch_size": SIM_ENGINE.max_batch_size, "chunked_prefill_tokens": None, "peer_call_ms": 0.0}
FULL = dict(short_requests=1000, long_requests=200, seeds=3)  # e2e's points: the default arm checks the curves
QUICK = dict(short_requests=60, long_requests=8, seeds=1)
PARAMS = (
    Param("inputs", str, None, "comma-separated inputs to vary (default all): " + ", ".join(ARMS)),
    Param("traces", int_list, None, "only these trace ids (default 0-8; 0 with --quick)"),
    Param("short_requests", int, None, "requests per probe, traces 0-2 (1000; 60 with --quick)"),
    Param("long_requests", int, None, "requests per probe, traces 3-8 (200; 8 with --quick)"),
    Param("seeds", int, None, "seeds per probe (3; 1 with --quick)"),
    *sweep_params(),
)


def point_with_prefill(prefill_flops_per_s: float, task) -> dict:
    """run_point with another prefill attention rate: the cached cost model of the system's instances is
    swapped for one with that rate for this point (the calibration file is not touched)."""
    cfg = system_config(task.system, task.base)
    model = sim_config.perf_model(cfg)
    key = (cfg.model, cfg.gpu, cfg.tp, cfg.pp, str(cfg.link), None, None)  # sim/config.py's cache key
    per_pair = 4 * model_spec(cfg.model).hidden_size / cfg.tp / prefill_flops_per_s
    sim_config._MODELS[key] = dataclasses.replace(model, prefill_attn_s_per_pair=per_pair)
    try:
        return run_point(task.system, task.base, task.requests, task.rate_per_s, task.seed,
                         steady_only=task.steady_only)
    finally:
        sim_config._MODELS[key] = model


def scaled_long_outputs(make, scale: float, rate_per_s: float, seed: int):
    requests = make(rate_per_s, seed)
    cut = float(np.quantile([r.prompt_len for r in requests], LONG_QUANTILE))
    return [dataclasses.replace(r, output_len=max(1, round(r.output_len * scale))) if r.prompt_len >= cut else r
            for r in requests]


def arm_group(group: CurveGroup, inp: str, value) -> CurveGroup:
    g = CurveGroup(dict(group.info), group.base, group.make_requests, group.systems, f"{group.label} {inp}={value}")
    if inp == "prefill_tflops" and value != CALIBRATED_PREFILL_TFLOPS:
        g.runner = partial(point_with_prefill, value * 1e12)
    elif inp == "link":
        g.base = dataclasses.replace(group.base, link=value)
    elif inp == "long_output_scale" and value != 1.0:
        g.make_requests = partial(scaled_long_outputs, group.make_requests, value)
    elif inp == "max_batch_size":
        g.base = with_engine(group.base, max_batch_size=value)
    elif inp == "chunked_prefill_tokens" and value is not None:
        g.base = with_engine(group.base, chunked_prefill_tokens=value)
    elif inp == "peer_call_ms" and value:
        costs = dataclasses.replace(engine_costs(group.base), peer_call_s=value / 1e3)
        g.base = dataclasses.replace(group.base, engine_costs=costs)
    return g


def owners(groups: list[CurveGroup]) -> list[dict[str, int]]:
    """For each arm's group and system, the index of the first group whose climb of that system serves the same
    points (run_key): each input's default arm is one configuration, and a system without pooling runs the same
    under every link. Each climb runs once; the others read its points."""
    firsts, out = [], []
    for i, g in enumerate(groups):
        own = {}
        for s in g.systems:
            key = run_key(g, s)
            j = next((k for k, ks, kk in firsts if ks == s and kk == key), None)
            if j is None:
                firsts.append((i, s, key))
            own[s] = i if j is None else j
        out.append(own)
    return out


def run_key(g: CurveGroup, system: str) -> tuple:
    return (g.info, as_simulated(system_config(system, g.base)), g.make_requests, g.runner, g.probe_fraction)


def cap_twins(arms: list[tuple]) -> dict[int, int]:
    """Each batch-cap arm other than the default -> the default cap's arm of the same group."""
    default = {id(a[3]): i for i, a in enumerate(arms) if a[0] == "max_batch_size" and a[1] == DEFAULTS[a[0]]}
    return {i: default[id(a[3])] for i, a in enumerate(arms)
            if a[0] == "max_batch_size" and a[1] != DEFAULTS[a[0]] and id(a[3]) in default}


def cap_twin_point(twin_points: dict, twin_cap: int, task: PointTask) -> dict | None:
    """The default cap's point at the same rate and seed when neither cap could have bound in it (else None: run
    it): its running batch stayed below both (peak_batch_size), and a cap is read only as `running < cap`, so the
    run is the same run, step for step (its wall_s is 0: not simulated again)."""
    bound = min(task.base.engine.max_batch_size, twin_cap)
    for p in twin_points.get(task.system, ()):
        if (p["rate_per_s"] == task.rate_per_s and p["seed"] == task.seed and p.get("peak_batch_size") is not None
                and p["peak_batch_size"] < bound):
            return {**p, "wall_s": 0.0}
    return None


def run(params, log) -> dict:
    return run_in_sweep(typed("sensitivity", PARAMS, params), log, "sensitivity", on_sweep)


async def on_sweep(params, log, sweep) -> dict:
    params = typed("sensitivity", PARAMS, params)
    size = dict(QUICK if params.quick else FULL)
    size.update({k: params.extra[k] for k in size if params.extra.get(k) is not None})
    e2e_params = RunParams(quick=params.quick, seed=params.seed,
                           extra={"traces": params.extra.get("traces"), "short_requests": size["short_requests"],
                                  "long_requests": size["long_requests"]})
    base_groups = curve_groups(e2e_params, sizes(e2e_params), link=DEFAULT_LINK, source="fitted")
    inputs = params.extra["inputs"].split(",") if params.extra.get("inputs") else list(ARMS)
    arms = []
    for inp in inputs:
        if inp not in ARMS:
            raise InputError(f"unknown input {inp!r}; choose from {', '.join(ARMS)}")
        arms += [(inp, value, label, g, arm_group(g, inp, value)) for value, label in ARMS[inp] for g in base_groups]
    seeds = tuple(params.seed + i for i in range(size["seeds"]))
    owner = owners([a[4] for a in arms])
    climbed = await climb_arms(arms, owner, cap_twins(arms), seeds, sweep)
    per_seed = [[{s: climbed[o][k] for s, o in own.items()} for own in owner] for k in range(len(seeds))]
    twins = cap_twins(arms)
    copied = sum(p["wall_s"] == 0.0 for i in twins for groups in per_seed for s, g in groups[i].items()
                 for p in g.probe_points.get(s, []))
    if twins:
        log(f"batch-cap arms: {copied} points were the default cap's run (their batch stayed below both caps)")
    rows = []
    for i, (inp, value, label, g, _) in enumerate(arms):
        rows.append({"input": inp, "value": str(value), "label": label, "default": value == DEFAULTS[inp],
                     "panel": g.info["panel"], "trace_id": g.info["trace_id"], "num_gpus": g.info["num_gpus"],
                     "baseline": g.info["baseline"], "num_requests": g.info["num_requests"],
                     **arm_plateau([groups[i] for groups in per_seed], seeds, g.info["baseline"])})
    return {"gpu": GPU, "seeds": list(seeds), "rows": rows, "notes": []}


async def climb_arms(arms: list[tuple], owner: list[dict], twins: dict, seeds, sweep) -> dict[int, list[CurveGroup]]:
    """Each climbing arm's groups, one per seed (arm index -> groups), all arms at once: an arm's later seeds side
    by side as soon as its first is done, a batch-cap arm's seed as soon as the default cap's climb of that seed is
    done (its points answer those of the capped arm's that no cap could have bound)."""
    climbing = [i for i, own in enumerate(owner) if i in own.values()]
    done = {(i, k): asyncio.get_running_loop().create_future() for i in climbing for k in range(len(seeds))}

    async def arm_seed(i: int, k: int, first: CurveGroup | None) -> CurveGroup:
        g = dataclasses.replace(arms[i][4], systems=tuple(s for s, o in owner[i].items() if o == i),
                                saturation_per_s={}, probe_points={}, info=dict(arms[i][4].info))
        if i in twins:
            twin = {s: (await done[(owner[twins[i]][s], k)]).probe_points[s] for s in g.systems}
            sweep.after([p for points in twin.values() for p in points])
            g.answer = partial(cap_twin_point, twin, arms[twins[i]][4].base.engine.max_batch_size)
        await climb_seed(g, first, seeds[k], sweep)
        done[(i, k)].set_result(g)
        return g

    async def arm(i: int) -> list[CurveGroup]:
        first = await arm_seed(i, 0, None)  # the later seeds start from its reading rates, side by side
        return [first, *await sweep.gather(*(arm_seed(i, k, first) for k in range(1, len(seeds))))]

    return dict(zip(climbing, await sweep.gather(*(arm(i) for i in climbing))))


async def climb_seed(g: CurveGroup, first: CurveGroup | None, seed: int, sweep) -> None:
    """One seed's climb of one arm's group: its systems probed to past saturation (the first seed; `first` None) or
    served at the first seed's reading rates (`first`: the first seed's group), then extended to the plateau.
    Fills the group's probe_points (every point of the climb) and info["_probe_points"] (the first seed's probes
    alone)."""
    if first is None:
        await find_saturation(g, seed, sweep)
    else:
        await serve_reading_rates(g, first, seed, sweep)
    before = {s: list(g.probe_points.get(s, [])) for s in g.systems}
    await climbs_to_plateau([Climb(g.probe_points[s], partial(_probe_tasks, g, s, seed))
                             for s in g.systems if s in g.probe_points], sweep)
    g.info["_probe_points"] = before if first is None else {}


def _probe_tasks(g: CurveGroup, system: str, seed: int, rate_per_s: float, label: str = "plateau") -> list[PointTask]:
    return [PointTask(system, g.base, probe_spec(g, rate_per_s, seed), rate_per_s, f"{g.label} {label}", seed,
                      g.runner, steady_only=True, answer=g.answer)]


def reading_rates(points: list[dict]) -> list[float]:
    """Where a climb read its plateau: its top two rates (the rule's check) and the rate of its highest point."""
    top_two = sorted({p["rate_per_s"] for p in points})[-2:]
    best = max(points, key=lambda p: p["steady_output_tok_s"])["rate_per_s"]
    return sorted(set(top_two) | {best})


async def serve_reading_rates(g: CurveGroup, first: CurveGroup, seed: int, sweep) -> None:
    """A later seed's start (in place of find_saturation): each system serves the rates at which the first seed's
    climb read its plateau (reading_rates); the plateau rule then goes on from there."""
    pairs = [(s, rate) for s in g.systems if s in first.probe_points for rate in reading_rates(first.probe_points[s])]
    points = await sweep.points([_probe_tasks(g, s, seed, rate, "seed-0 rates")[0] for s, rate in pairs])
    for (s, _), point in zip(pairs, points):
        g.probe_points.setdefault(s, []).append(point)


def arm_plateau(per_seed: list[dict], seeds, baseline: str) -> dict:
    """One arm's row fields from the group that climbed each system, per seed ({system: group}): the ratio of the
    plateaus (probes extended to where the top two agree) with its spread, the first seed's ratio of its probes
    alone, each system's plateau per seed, and whether each seed's climb reached it."""
    systems = list(per_seed[0])
    plateau = {s: [max_tput_tok_s(groups[s].probe_points.get(s, []), seed) for groups, seed in zip(per_seed, seeds)]
               for s in systems}
    probe = {s: max_tput_tok_s(per_seed[0][s].info["_probe_points"].get(s, []), seeds[0]) for s in systems}
    ratios = [a / b for a, b in zip(plateau["infinite-llm"], plateau[baseline]) if b > 0]
    return {"ratio": float(np.median(ratios)) if ratios else None,
            "ratio_min": min(ratios) if ratios else None, "ratio_max": max(ratios) if ratios else None,
            "plateau_tok_s": plateau,
            "probe_ratio": probe["infinite-llm"] / probe[baseline] if probe[baseline] > 0 else None,
            "plateau_reached": {s: [reaches_plateau(groups[s].probe_points.get(s, [])) for groups in per_seed]
                                for s in systems}}


def claims(results) -> list[ClaimRow]:
    """Per Fig 10 panel and input: the range of the ratio over the input's arms (median over the panel's groups),
    beside the paper's range: which input moves the ratio by how much."""
    result = main_result(results)
    rows = []
    data = result["data"]["rows"]
    for panel, (claim_id, paper, low, high) in PAPER.items():
        for inp in dict.fromkeys(r["input"] for r in data):
            arms, probes = {}, {}
            for r in data:
                if r["panel"] == panel and r["input"] == inp and r["ratio"] is not None:
                    arms.setdefault(r["label"], []).append(r["ratio"])
                    if r.get("probe_ratio") is not None:
                        probes.setdefault(r["label"], []).append(r["probe_ratio"])
            if not arms:
                continue
            medians = {label: float(np.median(v)) for label, v in arms.items()}
            default = next((r["label"] for r in data if r["input"] == inp and r["default"]), None)
            text = ", ".join(f"{label} {m:.2f}x" + (f" (probes {np.median(probes[label]):.2f}x)"
                                                      if label in probes else "") for label, m in medians.items())
            rows.append(ClaimRow(claim_id, f"sensitivity {panel}: {inp} (median over groups)", paper, low, high,
                                 medians.get(default), "x", f"{text} ({result['run_id']})"))
        rows += _largest_moves(data, panel, claim_id, paper, low, high)
    return rows


def _largest_moves(data: list[dict], panel: str, claim_id: str, paper: str, low: float, high: float) -> list:
    """Per panel: the highest ratio any arm reaches in any group, and per input the largest change of a group's
    ratio from its default arm (how far the uncertain inputs can move the claim)."""
    own = [r for r in data if r["panel"] == panel and r["ratio"] is not None]
    if not own:
        return []
    default = {(r["input"], r["trace_id"], r["num_gpus"]): r["ratio"] for r in own if r["default"]}
    moves = {}
    for r in own:
        base = default.get((r["input"], r["trace_id"], r["num_gpus"]))
        if base is not None and abs(r["ratio"] - base) > abs(moves.get(r["input"], (0.0, ""))[0]):
            moves[r["input"]] = (r["ratio"] - base, f"{r['label']}, trace {r['trace_id']}/{r['num_gpus']} GPUs")
    best = max(own, key=lambda r: r["ratio"])
    text = "; ".join(f"{inp} {d:+.2f}x ({where})" for inp, (d, where) in moves.items())
    return [ClaimRow(claim_id, f"sensitivity {panel}: highest ratio of any arm and group", paper, low, high,
                     best["ratio"], "x", f"{best['input']}={best['label']}, trace {best['trace_id']}/"
                     f"{best['num_gpus']} GPUs ({best['ratio_min']:.2f}-{best['ratio_max']:.2f} over the seeds); "
                     f"largest change of a median from the default per input: {text}")]


def plot(results, figures_dir) -> list[str]:
    return plot_sensitivity(main_result(results)["data"], figures_dir)


EXPERIMENT = Experiment("sensitivity", ("infinite-llm Fig 10 (sensitivity)",), "sensitivity.schema.json", run,
                        default_run_id, plot=plot, claims=claims, params=PARAMS, on_sweep=on_sweep)
