"""e2e (infinite-llm Fig 10a/10b): throughput-latency curves over request rates on the simulated A100 cluster.

Fig 10a: traces 0-2 (short) on LLaMA2-7B instances of one GPU, at two instance counts, against vLLM-M.
Fig 10b: traces 3-8 (long) against vLLM-S; each trace runs on the (model, GPUs) row of distkv-llm Table 2
whose range it matches (200K: 7B/2, 280K: 13B/4, 600K: 70B/8, 480K: 13B/8, 1200K: 7B/16, 2000K: 7B/32).
The curve method (measured saturation, rate grid, seeds, steady-state window, plateau) is repro/serving/curves.py's;
the points run in one process per core (`--param workers=N`), or on a Ray cluster (`--address`), finished ones
reused from the store of points (repro/serving/sweep.py). A bigger run: `--param seeds=5
--param short_requests=3000 --param long_requests=500` (make fig10 FIG10_PARAMS="..."); traces 3-8 place their
grid from probes of half a point's requests (`--param long_probe_fraction=1`: whole points).
"""
from functools import partial

from repro.framework.base import ClaimRow, Experiment, default_run_id
from repro.framework.params import LINK_HELP, Param, fraction, int_list, link
from repro.serving.sweep import run_in_sweep, sweep_params
from repro.serving.tasks import typed, workload
from repro.serving.curves import LONG_PROBE_FRACTION, CurveGroup, curves
from repro.serving.claims import claim_note
from repro.serving.on_ray import RAY_PARAMS, run_on_ray
from reference_impl.calibration.links import DEFAULT_LINK
from reference_impl.sim.config import sim_engine
from reference_impl.systems.registry import cluster

GPU = "A100-80GB-SXM"
LONG_SETTINGS = {3: ("llama2-7b", 2), 4: ("llama2-13b", 4), 5: ("llama2-70b", 8), 6: ("llama2-13b", 8),
                 7: ("llama2-7b", 16), 8: ("llama2-7b", 32)}
FULL = dict(short_traces=(0, 1, 2), instance_counts=(4, 8), long_traces=(3, 4, 5, 6, 7, 8),
            short_requests=1000, long_requests=200)
QUICK = dict(short_traces=(0,), instance_counts=(4,), long_traces=(3,), short_requests=100, long_requests=20)
SIM = ("sim",)
PARAMS = (
    Param("seeds", int, 3, "seeds per point (seed, seed+1, ...): lengths, arrivals and simulator", backends=SIM),
    Param("short_requests", int, None, "requests per point, traces 0-2 (1000; 100 with --quick)", backends=SIM),
    Param("long_requests", int, None, "requests per point, traces 3-8 (200; 20 with --quick)", backends=SIM),
    Param("traces", int_list, None, "only these trace ids (default: 0-8; 0 and 3 with --quick)", backends=SIM),
    Param("long_probe_fraction", fraction, LONG_PROBE_FRACTION,
          "traces 3-8: share of a point's requests (a prefix) the saturation probes serve; 1: the whole point",
          backends=SIM),
    Param("link", link, DEFAULT_LINK, LINK_HELP, backends=SIM),
    Param("source", str, "fitted", "workload lengths", choices=("fitted", "auto"), backends=("sim", "ray")),
    *sweep_params(backends=SIM),
    *RAY_PARAMS,
    *(Param(k, str, None, h, backends=("vllm",)) for k, h in (
        ("num_requests", "requests per trace"), ("instances", "engines per system"),
        ("rates", "comma-separated request rates"), ("traces", "comma-separated trace ids"))),
)


def groups(size: dict):
    for trace in size["short_traces"]:
        for n in size["instance_counts"]:
            yield dict(trace_id=trace, panel="10a", model="llama2-7b", num_gpus=n, baseline="vllm-m",
                       num_requests=size["short_requests"])
    for trace in size["long_traces"]:
        model, gpus = LONG_SETTINGS[trace]
        yield dict(trace_id=trace, panel="10b", model=model, num_gpus=gpus, baseline="vllm-s",
                   num_requests=size["long_requests"])


def sizes(params) -> dict:
    size = dict(QUICK if params.quick else FULL)
    for key in ("short_requests", "long_requests"):
        if params.extra.get(key) is not None:
            size[key] = params.extra[key]
    traces = params.extra.get("traces")
    if traces is not None:
        size["short_traces"] = tuple(t for t in traces if t in (0, 1, 2))
        size["long_traces"] = tuple(t for t in traces if t in LONG_SETTINGS)
    return size


def curve_groups(params, size: dict, *, link: str, source: str) -> list[CurveGroup]:
    long_probe_fraction = params.extra.get("long_probe_fraction") or LONG_PROBE_FRACTION
    out = []
    for g in groups(size):
        base = cluster(g["model"], GPU, g["num_gpus"], link=link, engine=sim_engine(seed=params.seed))
        make = partial(_requests, g["trace_id"], g["num_requests"], source)
        out.append(CurveGroup(g, base, make, ("infinite-llm", g["baseline"]),
                              f"trace {g['trace_id']} {g['model']} {g['num_gpus']} GPUs",
                              probe_fraction=long_probe_fraction if g["panel"] == "10b" else 1.0))
    return out


def _requests(trace_id: int, num_requests: int, source: str, rate_per_s: float, seed: int):
    return workload(trace_id=trace_id, num_requests=num_requests, rate_per_s=rate_per_s, seed=seed, source=source)


def seeds_of(params) -> tuple[int, ...]:
    return tuple(params.seed + i for i in range(max(1, params.extra.get("seeds", 1))))


def run(params, log) -> dict:
    params = typed("e2e", PARAMS, params)
    if params.backend == "ray":  # served for real by Ray actors: repro/serving/on_ray.py
        return run_on_ray(params, log, list(groups(FULL)))  # its own sizes and traces (ray_traces)
    if params.backend == "vllm":  # real vLLM-M vs our local engine at CPU scale: baselines/real_vllm/e2e.py
        from baselines.real_vllm.e2e import run as run_real
        return run_real(params, log)
    return run_in_sweep(params, log, "e2e", on_sweep)


async def on_sweep(params, log, sweep) -> dict:
    params = typed("e2e", PARAMS, params)
    link, source = params.extra["link"], params.extra["source"]
    todo = curve_groups(params, sizes(params), link=link, source=source)
    out = await curves(todo, seeds_of(params), sweep)
    return {"gpu": GPU, "link": link, "source": source, "groups": out}


PAPER = {"10a": ("e2e-vs-vllm-m", "1.35x-1.73x", 1.35, 1.73), "10b": ("e2e-vs-vllm-s", "1.4x-3.4x", 1.4, 3.4)}


def claims(results) -> list[ClaimRow]:
    from repro.framework.figures import main_result  # not at the top: the points' nodes need only numpy and ray
    result = main_result(_not_vllm(results))
    rows = []
    for g in result["data"]["groups"]:
        if g["panel"] not in PAPER:
            continue
        claim_id, paper, low, high = PAPER[g["panel"]]
        ratio = g["max_tput_ratio"]
        rows.append(ClaimRow(claim_id, f"max tput ratio, trace {g['trace_id']}, {g['num_gpus']} GPUs "
                             f"({result['run_id']})", paper, low, high, ratio, "x", claim_note(g, low, high)))
    return rows


def plot(results, figures_dir) -> list[str]:
    from repro.experiments.e2e_figures import plot_latency
    from repro.framework.figures import main_result
    from repro.serving.plots import plot_curves
    result = main_result(_not_vllm(results))
    written = plot_curves(result["data"]["groups"], figures_dir, "infinite-llm-fig", "trace")
    return written + (plot_latency(result, figures_dir) if result["params"]["backend"] == "sim" else [])


def _not_vllm(results):
    """Fig 10 and its claims: real-vLLM CPU runs (panel real-cpu) only when there is nothing else."""
    return [r for r in results if r["params"]["backend"] != "vllm"] or results


EXPERIMENT = Experiment("e2e", ("infinite-llm Fig 10a", "infinite-llm Fig 10b"), "serving.schema.json", run,
                        default_run_id, plot=plot, claims=claims, backends=("sim", "ray", "vllm"), params=PARAMS,
                        on_sweep=on_sweep)
