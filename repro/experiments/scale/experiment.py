"""scale (issue 42): does Infinite-LLM's gain over vLLM-M keep growing past the paper's 32 GPUs?

Fig 10a's setting (LLaMA2-7B instances of one A100, traces 0-2) plus one long trace (LONG_TRACE), at cluster sizes
from 8 to 1024 GPUs with the same requests per GPU (so the same load per GPU along each curve). Each (trace, size)
is a serving group of the figures' method (repro/serving/curves.py: measured saturation, rate grid, seeds,
steady-state window, plateau), Infinite-LLM against vLLM-M; its `max_tput_ratio` is the gain. Beside it, the
gManager's own round at each size (repro/benchmarks/scale_gmanager.py: heartbeat intake, Algorithm 1, DGFM, in CPU
time on this machine; not part of any simulated number). The report row: infinite-llm 10a's claim that the gain
grows with the instance count, as the gain at the largest size over the gain at 32 GPUs, per trace.
"""
from dataclasses import asdict
from functools import partial

from repro.experiments.e2e import _requests
from repro.framework.base import ClaimRow, Experiment, default_run_id
from repro.framework.params import LINK_HELP, Param, int_list, link
from repro.serving.curves import LONG_PROBE_FRACTION, CurveGroup, curves
from repro.serving.sweep import run_in_sweep, sweep_params
from repro.serving.tasks import typed
from reference_impl.calibration.links import DEFAULT_LINK
from reference_impl.sim.config import sim_engine
from reference_impl.systems.registry import cluster

GPU, MODEL = "A100-80GB-SXM", "llama2-7b"
LONG_TRACE = 3
REFERENCE_GPUS = 32  # the paper's largest cluster: the gain there is what the report row compares with
# The largest size runs on `top_traces` only (the others stop one size below): a 1024-GPU group of a short trace is
# about 45 CPU minutes here (58 points of 32,000 requests), so all four at 1024 would be 3 hours on this machine.
FULL = dict(traces=(0, 1, 2, LONG_TRACE), gpus=(8, 32, 128, 512, 1024), requests_per_gpu=31.25,
            long_requests_per_gpu=1.0, top_traces=(0,))
QUICK = dict(traces=(0,), gpus=(8, 32), requests_per_gpu=4.0, long_requests_per_gpu=0.5, top_traces=(0,))
MIN_REQUESTS = 20
PARAMS = (
    Param("seeds", int, 3, "seeds per point (seed, seed+1, ...); 1 with --quick"),
    Param("gpus", int_list, None, "cluster sizes (default 8,32,128,512,1024; 8,32 with --quick)"),
    Param("traces", int_list, None, f"trace ids (default 0,1,2,{LONG_TRACE}; 0 with --quick)"),
    Param("top_traces", int_list, None, "traces that also run at the largest size (default 0; the others stop one "
          "size below)"),
    Param("requests_per_gpu", float, None, "requests per GPU, short traces (31.25; 4 with --quick)"),
    Param("long_requests_per_gpu", float, None, f"requests per GPU, trace {LONG_TRACE} (1; 0.5 with --quick)"),
    Param("link", link, DEFAULT_LINK, LINK_HELP),
    Param("source", str, "fitted", "workload lengths", choices=("fitted", "auto")),
    *sweep_params(),
)


def sizes(params) -> dict:
    size = dict(QUICK if params.quick else FULL)
    for key in ("gpus", "traces", "requests_per_gpu", "long_requests_per_gpu", "top_traces"):
        if params.extra.get(key) is not None:
            size[key] = params.extra[key]
    return size


def groups(params, size: dict) -> list[CurveGroup]:
    link_, source = params.extra["link"], params.extra["source"]
    out = []
    for trace in size["traces"]:
        per_gpu = size["long_requests_per_gpu"] if trace == LONG_TRACE else size["requests_per_gpu"]
        top = max(size["gpus"])
        for num_gpus in size["gpus"]:
            if num_gpus == top and trace not in size["top_traces"] and len(size["gpus"]) > 1:
                continue
            n = max(MIN_REQUESTS, round(per_gpu * num_gpus))
            base = cluster(MODEL, GPU, num_gpus, link=link_, engine=sim_engine(seed=params.seed))
            info = dict(trace_id=trace, panel="scale", model=MODEL, num_gpus=num_gpus, baseline="vllm-m",
                        num_requests=n)
            out.append(CurveGroup(info, base, partial(_requests, trace, n, source), ("infinite-llm", "vllm-m"),
                                  f"scale trace {trace} {num_gpus} GPUs",
                                  probe_fraction=LONG_PROBE_FRACTION if trace == LONG_TRACE else 1.0))
    return out


def run(params, log) -> dict:
    return run_in_sweep(typed("scale", PARAMS, params), log, "scale", on_sweep)


async def on_sweep(params, log, sweep) -> dict:
    from repro.benchmarks.scale_gmanager import round_cost

    params = typed("scale", PARAMS, params)
    size = sizes(params)
    seeds = tuple(params.seed + i for i in range(1 if params.quick else max(1, params.extra["seeds"])))
    out = await curves(groups(params, size), seeds, sweep)
    rounds = [asdict(round_cost(g)) for g in size["gpus"]]
    return {"gpu": GPU, "link": params.extra["link"], "source": params.extra["source"], "groups": out,
            "gmanager_rounds": rounds}


def gain_growth(data: dict) -> list[tuple[int, int, float | None, float | None]]:
    """Per trace: (trace, largest size, its gain over the gain at REFERENCE_GPUS (medians over seeds), the same
    beyond the seeds' spread: the worst seed's gain there over the best seed's at REFERENCE_GPUS); None where
    either is missing or the run has no size above REFERENCE_GPUS."""
    rows = []
    for trace in dict.fromkeys(g["trace_id"] for g in data["groups"]):
        by_size = {g["num_gpus"]: g for g in data["groups"] if g["trace_id"] == trace}
        largest, ref = max(by_size), by_size.get(REFERENCE_GPUS)
        top = by_size[largest]
        if largest <= REFERENCE_GPUS or not ref or not ref["max_tput_ratio"] or top["max_tput_ratio"] is None:
            rows.append((trace, largest, None, None))
            continue
        low = (top["max_tput_ratio_min"] / ref["max_tput_ratio_max"]
               if top.get("max_tput_ratio_min") and ref.get("max_tput_ratio_max") else None)
        rows.append((trace, largest, top["max_tput_ratio"] / ref["max_tput_ratio"], low))
    return rows


def claims(results) -> list[ClaimRow]:
    from repro.framework.figures import main_result
    result = main_result(results)
    rows = []
    for trace, largest, growth, low in gain_growth(result["data"]):
        note = (f"no size above {REFERENCE_GPUS} GPUs in this run" if largest <= REFERENCE_GPUS else
                "" if growth is None else f"median over seeds {growth:.3f}x")
        rows.append(ClaimRow("e2e-vs-vllm-m", f"gain at {largest} GPUs / at {REFERENCE_GPUS}, worst seed / best, trace "
                             f"{trace} ({result['run_id']})", "grows (>1x)", 1.0, float("inf"), low, "x", note))
    return rows


def plot(results, figures_dir) -> list[str]:
    from repro.experiments.scale.plot import plot_scale
    from repro.framework.figures import main_result
    return plot_scale(main_result(results)["data"], figures_dir)


EXPERIMENT = Experiment("scale", ("infinite-llm Fig 10a, past 32 GPUs",), "scale.schema.json", run, default_run_id,
                        plot=plot, claims=claims, params=PARAMS, on_sweep=on_sweep)
