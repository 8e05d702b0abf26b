"""e2e-datasets (distkv-llm Fig 8): throughput-latency on the 18 datasets of distkv-llm Table 2 against vLLM-S.

Each dataset runs on its Table 2 row (model, GPUs): Infinite-LLM instances of `instance_tp` GPUs against one
vLLM instance of all of them (the paper's baseline holds the same GPUs). The curve method is
repro/serving/curves.py's (measured saturation, six rates, seeds, steady-state window, plateau); 200 requests per
point by default (the paper used 1000: `--param num_requests=1000`, make fig8-distkv FIG8_PARAMS="...").
"""
from functools import partial

from repro.framework.base import ClaimRow, Experiment, default_run_id
from repro.framework.figures import main_result
from repro.framework.params import LINK_HELP, Param, fraction, int_list, link
from repro.serving.claims import claim_note
from repro.serving.plots import plot_curves
from repro.serving.sweep import run_in_sweep, sweep_params
from repro.serving.tasks import typed, workload
from repro.serving.curves import LONG_PROBE_FRACTION, CurveGroup, curves
from reference_impl.calibration.links import DEFAULT_LINK
from reference_impl.sim.config import sim_engine
from reference_impl.systems.registry import cluster
from workloads.paper_tables import DATASETS

GPU = "A100-80GB-SXM"
FULL = dict(datasets=tuple(range(1, 19)), num_requests=200)
QUICK = dict(datasets=(1,), num_requests=20)
PAPER_RANGES = {0.01: ("1.4x-2.4x", 1.4, 2.4), 0.10: ("1.1x-1.4x", 1.1, 1.4), 0.30: ("1.03x-1.3x", 1.03, 1.3)}
PARAMS = (
    Param("seeds", int, 3, "seeds per point (seed, seed+1, ...): lengths, arrivals and simulator"),
    Param("num_requests", int, None, "requests per point (200; 20 with --quick; the paper used 1000)"),
    Param("datasets", int_list, None, "only these dataset ids (default 1-18; 1 with --quick)"),
    Param("link", link, DEFAULT_LINK, LINK_HELP),
    Param("source", str, "fitted", "workload lengths", choices=("fitted", "auto")),
    *sweep_params(),
    Param("probe_fraction", fraction, LONG_PROBE_FRACTION,
          "share of a point's requests (a prefix) the saturation probes serve; 1: the whole point"),
)


def _requests(dataset_id: int, num_requests: int, source: str, rate_per_s: float, seed: int):
    return workload(dataset_id=dataset_id, num_requests=num_requests, rate_per_s=rate_per_s, seed=seed,
                    source=source)


def run(params, log) -> dict:
    return run_in_sweep(typed("e2e-datasets", PARAMS, params), log, "e2e-datasets", on_sweep)


async def on_sweep(params, log, sweep) -> dict:
    params = typed("e2e-datasets", PARAMS, params)
    size = QUICK if params.quick else FULL
    n = params.extra.get("num_requests") or size["num_requests"]
    link, source = params.extra["link"], params.extra["source"]
    todo = []
    for dataset_id in params.extra.get("datasets") or size["datasets"]:
        row = DATASETS[dataset_id]
        model = row.model.lower()
        base = cluster(model, GPU, row.num_gpus, link=link, engine=sim_engine(seed=params.seed))
        info = {"dataset_id": dataset_id, "long_ratio": row.long_ratio, "panel": "8", "model": model,
                "num_gpus": row.num_gpus, "baseline": "vllm-s", "num_requests": n}
        todo.append(CurveGroup(info, base, partial(_requests, dataset_id, n, source), ("infinite-llm", "vllm-s"),
                               f"dataset {dataset_id} {model} {row.num_gpus} GPUs",
                               probe_fraction=params.extra["probe_fraction"]))
    seeds = tuple(params.seed + i for i in range(max(1, params.extra["seeds"])))
    groups = await curves(todo, seeds, sweep)
    return {"gpu": GPU, "link": link, "source": source, "groups": groups}


def claims(results) -> list[ClaimRow]:
    result = main_result(results)
    rows = []
    for g in result["data"]["groups"]:
        paper, low, high = PAPER_RANGES[g["long_ratio"]]
        ratio = g["max_tput_ratio"]
        rows.append(ClaimRow("e2e-distkv", f"max tput vs vLLM-S, dataset {g['dataset_id']} "
                             f"({g['long_ratio']:.0%} long, {g['model']}, {g['num_gpus']} GPUs)", paper, low, high,
                             ratio, "x", claim_note(g, low, high)))
    return rows


def plot(results, figures_dir) -> list[str]:
    return plot_curves(main_result(results)["data"]["groups"], figures_dir, "distkv-llm-fig", "dataset")


EXPERIMENT = Experiment("e2e-datasets", ("distkv-llm Fig 8",), "serving.schema.json", run, default_run_id,
                        plot=plot, claims=claims, params=PARAMS, on_sweep=on_sweep)
