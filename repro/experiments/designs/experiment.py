"""designs: every design of the catalog (reference_impl/systems/catalog.py) on every Fig 10 group: traces 0-2 on
LLaMA2-7B instances of one GPU (4 and 8 GPUs) and traces 3-8 on the (model, GPUs) rows of
repro/experiments/e2e.py's LONG_SETTINGS, the same GPUs reshaped by each design.

Method: repro/serving/curves.py's, the other figures' (measured saturation, one rate grid per group shared by its
designs, every seed at every rate, steady-state window, max throughput at the plateau), each point with the
counters that say why (counters.py). Per design and group (compare.py): max throughput and its ratio to the
group's baseline, vLLM-M on traces 0-2 and vLLM-S on 3-8 (added to the run when not asked for); p50/p99 TTFT and
TPOT at the common rate, half the weakest design's measured saturation (a rate of the grid); the counters there and
at the design's plateau. A design whose cluster cannot be built, whose simulation raises or which serves nothing
at any probe is reported failed in that group with its error; the others go on. Each design's own headline claim
is measured by claims.py (extra arms, e.g. vLLM-S with chunked prefill, run as groups of their own); the run's
cost (CPU seconds per point and design, predicted wall time on N cores) by cost.py.
"""
from dataclasses import asdict

from repro.experiments import e2e
from repro.experiments.designs.claims import arm_groups, claim_points
from repro.experiments.designs.compare import first_error, group_comparison
from repro.experiments.designs.cost import run_cost
from repro.experiments.designs.counters import design_config, design_runner
from repro.experiments.designs.goodput import goodput_jobs
from repro.experiments.designs.normalise import hardware
from repro.framework.base import Experiment, default_run_id
from repro.framework.params import Param, ParamValueError, positive_int
from repro.serving.curves import CurveGroup, curve, find_saturation
from repro.serving.sweep import run_in_sweep, sweep_params
from repro.serving.tasks import typed
from reference_impl.errors import InputError
from reference_impl.systems.catalog import DESIGNS, design

QUICK_SIZE = dict(short_requests=60, long_requests=20)  # traces 0 and 3 (e2e.QUICK), one seed
FULL_SIZE = dict(short_requests=300, long_requests=60)  # docs/designs.md: what keeps the default under 15 minutes
QUICK_SEEDS, FULL_SEEDS = 1, 3


def design_list(raw) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(x.strip() for x in (raw if isinstance(raw, (tuple, list)) else str(raw).split(","))
                                if x.strip()))
    unknown = [n for n in names if n not in DESIGNS]
    if not names or unknown:
        raise ParamValueError(f"unknown design {', '.join(unknown) or repr(raw)}; choose from {', '.join(DESIGNS)}")
    return names


PARAMS = (
    Param("designs", design_list, None, "comma-separated designs (default: every design of the catalog); each "
          "group's baseline (vllm-m on traces 0-2, vllm-s on 3-8) is always run"),
    Param("seeds", positive_int, None, f"seeds per point (default {FULL_SEEDS}; {QUICK_SEEDS} with --quick)"),
    Param("short_requests", positive_int, None, f"requests per point, traces 0-2 (default {FULL_SIZE['short_requests']}; "
          f"{QUICK_SIZE['short_requests']} with --quick)"),
    Param("long_requests", positive_int, None, f"requests per point, traces 3-8 (default {FULL_SIZE['long_requests']}; "
          f"{QUICK_SIZE['long_requests']} with --quick)"),
    *(p for p in e2e.PARAMS if p.name in ("traces", "long_probe_fraction", "link", "source") and "sim" in p.backends),
    *sweep_params(),
)


def sizes(params) -> dict:
    """e2e's groups (its traces, and --param traces) with this experiment's request counts."""
    unknown = [t for t in params.extra.get("traces") or () if t not in (0, 1, 2, *e2e.LONG_SETTINGS)]
    if unknown:
        raise InputError(f"--param traces: no Fig 10 group for trace {', '.join(map(str, unknown))}; "
                         f"choose from 0-8")
    size = e2e.sizes(params)
    for key, n in (QUICK_SIZE if params.quick else FULL_SIZE).items():
        if params.extra.get(key) is None:
            size[key] = n
    return size


def seeds_of(params) -> tuple[int, ...]:
    n = params.extra.get("seeds") or (QUICK_SEEDS if params.quick else FULL_SEEDS)
    return tuple(params.seed + i for i in range(n))


def chosen_designs(params) -> tuple[str, ...]:
    """The designs asked for, else every design of the catalog as it is now."""
    return params.extra.get("designs") or tuple(DESIGNS)


def run(params, log) -> dict:
    return run_in_sweep(typed("designs", PARAMS, params), log, "designs", on_sweep)


async def on_sweep(params, log, sweep) -> dict:
    params = typed("designs", PARAMS, params)
    designs, seeds = chosen_designs(params), seeds_of(params)
    link, source = params.extra["link"], params.extra["source"]
    todo = []
    for g in e2e.curve_groups(params, sizes(params), link=link, source=source):
        baseline = g.info["baseline"]
        g.systems = tuple(d for d in DESIGNS if d in designs or d == baseline)
        g.info["_knobs"] = workload_knobs(g, seeds[0])
        g.runner = design_runner(g.info["_knobs"])
        todo.append(g)
    shown = tuple(d for d in DESIGNS if any(d in g.systems for g in todo))
    arms = arm_groups(todo, designs)
    records = await sweep.gather(*(design_group(g, seeds, sweep) for g in todo + arms))
    await claim_points(arms, records[:len(todo)], records[len(todo):], designs, seeds, sweep)
    goodput = await goodput_jobs(todo, designs, seeds, source, sweep)
    return {"gpu": e2e.GPU, "link": link, "source": source, "designs": list(shown), "seeds": list(seeds),
            "groups": records[:len(todo)], "arms": records[len(todo):], "goodput": goodput,
            "cost": run_cost(sweep.graph.nodes, "designs")}


def workload_knobs(g: CurveGroup, seed: int) -> dict:
    """The knobs each of the group's designs fits to its workload (Design.workload_knobs: pd-disaggregation's split,
    searched per workload as DistServe does), from the requests of the group's points at `seed` (the run's first; a
    point's lengths do not depend on its rate)."""
    fitted, requests = {}, None
    for name in g.systems:
        fit = design(name).workload_knobs
        if fit is not None:
            requests = g.make_requests(1.0, seed) if requests is None else requests
            fitted[name] = fit(requests, None)
    return fitted


async def design_group(g: CurveGroup, seeds: tuple[int, ...], sweep) -> dict:
    """The group's curves of the designs that can serve it, and why the others cannot."""
    designs, failed, knobs, machines = g.systems, {}, g.info["_knobs"], {}
    for d in designs:
        try:
            machines[d] = hardware(design_config(d, g.base, knobs))
        except Exception as exc:  # noqa: BLE001 - this design cannot make this cluster: reported, the rest go on
            failed[d] = f"cluster: {type(exc).__name__}: {exc}"
    g.info["design_knobs"] = {d: asdict(k) for d, k in knobs.items() if d in machines}
    g.systems = tuple(d for d in designs if d not in failed)
    if g.systems:
        await find_saturation(g, seeds[0], sweep)
        for d, points in g.probe_points.items():
            error = first_error(points)
            if error or g.saturation_per_s[d] <= 0:
                failed[d] = error or "served nothing at any probe rate"
    ran = tuple(d for d in g.systems if d not in failed)
    if not ran:
        info = {k: v for k, v in g.info.items() if not k.startswith("_")}
        return group_comparison({**info, "rates_per_s": [], "points": [], "num_instances": g.base.engine.num_instances,
                                 "tp": g.base.tp}, failed, designs, machines)
    # the designs that serve it, afresh: their probes are the same points (shared within the run)
    fresh = CurveGroup(g.info, g.base, g.make_requests, ran, g.label, g.runner, probe_fraction=g.probe_fraction)
    return group_comparison(await curve(fresh, seeds, sweep), failed, designs, machines)


def plot(results, figures_dir) -> list[str]:
    from repro.experiments.designs.figure import plot_designs
    from repro.framework.figures import main_result
    from repro.serving.latency_figures import latency_vs_rate
    result = main_result(results)
    groups, written = result["data"]["groups"], plot_designs(results, figures_dir)
    for panel in sorted({g["panel"] for g in groups}):
        chosen = [g for g in groups if g["panel"] == panel]
        written += latency_vs_rate(chosen, figures_dir, f"designs-latency-{panel}",
                                   f"every design on Fig {panel}'s groups, {result['run_id']}: median over "
                                   f"{len(result['data']['seeds'])} seeds, band min-max")
    return written


EXPERIMENT = Experiment("designs", ("designs: Infinite-LLM beside the other designs on the Fig 10 groups",),
                        "designs.schema.json", run, default_run_id, plot=plot, params=PARAMS, on_sweep=on_sweep)
