"""e2e-datasets (distkv-llm Fig 8): throughput-latency on the 18 datasets of distkv-llm Table 2 against vLLM-S.

Each dataset runs on its Table 2 row (model, GPUs): Infinite-LLM instances of `instance_tp` GPUs against one
vLLM instance of all of them (the paper's baseline holds the same GPUs). Fewer requests than the paper's 1000
per dataset (`--param num_requests=N`) to keep the run short; rates as in `e2e`.
The points run in one process per core (`--param workers=N`; the numbers do not depend on it).
"""
from repro.experiments.base import ClaimRow, Experiment, default_run_id
from repro.experiments.figures import main_result
from repro.experiments.serving import (LINK_DEFAULT, curve_tasks, default_workers, max_throughput_ratio,
                                       nominal_rate_per_s, param, rate_grid, run_tasks, workload)
from reference_impl.sim.systems import cluster
from workloads.paper_tables import DATASETS

GPU = "A100-80GB-SXM"
FULL = dict(datasets=tuple(range(1, 19)), num_requests=12, multipliers=(0.5, 1.0, 2.0, 4.0))
QUICK = dict(datasets=(1, 7), num_requests=10, multipliers=(1.0, 4.0))
PAPER_RANGES = {0.01: ("1.4x-2.4x", 1.4, 2.4), 0.10: ("1.1x-1.4x", 1.1, 1.4), 0.30: ("1.03x-1.3x", 1.03, 1.3)}


def run(params, log) -> dict:
    size = QUICK if params.quick else FULL
    n = param(params, "num_requests", int, size["num_requests"])
    link = params.extra.get("link", LINK_DEFAULT)
    source = params.extra.get("source", "fitted")
    groups, tasks = [], []
    for dataset_id in size["datasets"]:
        row = DATASETS[dataset_id]
        model = row.model.lower()
        base = cluster(model, GPU, row.num_gpus, link=link, seed=params.seed)
        make = lambda rate, d=dataset_id: workload(dataset_id=d, num_requests=n, rate_per_s=rate, seed=params.seed,
                                                   source=source)
        rates = rate_grid(nominal_rate_per_s(base, make(1.0)), size["multipliers"])
        label = f"dataset {dataset_id} {model} {row.num_gpus} GPUs"
        log(f"{label}: rates {rates}")
        group_tasks = curve_tasks(("infinite-llm", "vllm-s"), base, make, rates, label)
        tasks += group_tasks
        groups.append(({"dataset_id": dataset_id, "long_ratio": row.long_ratio, "panel": "8", "model": model,
                        "num_gpus": row.num_gpus, "num_instances": base.num_instances, "tp": base.tp,
                        "baseline": "vllm-s", "num_requests": n, "rates_per_s": rates}, len(group_tasks)))
    points = iter(run_tasks(tasks, log, default_workers(params)))
    groups = [_with_points(g, [next(points) for _ in range(count)]) for g, count in groups]
    return {"gpu": GPU, "link": link, "source": source, "groups": groups, "link_sweep": []}


def _with_points(group: dict, points: list[dict]) -> dict:
    return {**group, "points": points, "max_tput_ratio": max_throughput_ratio(points, "infinite-llm", "vllm-s")}


def claims(results) -> list[ClaimRow]:
    result = main_result(results)
    rows = []
    for g in result["data"]["groups"]:
        paper, low, high = PAPER_RANGES[g["long_ratio"]]
        ratio = g["max_tput_ratio"]
        rows.append(ClaimRow("e2e-distkv", f"max tput vs vLLM-S, dataset {g['dataset_id']} "
                             f"({g['long_ratio']:.0%} long, {g['model']}, {g['num_gpus']} GPUs)", paper, low, high,
                             ratio, "x", "" if ratio is None or low <= ratio <= high else
                             f"simulated, {g['num_requests']} requests per point"))
    return rows


def plot(results, figures_dir) -> list[str]:
    from repro.experiments.serving_plots import plot_curves
    return plot_curves(main_result(results)["data"]["groups"], figures_dir, "distkv-llm-fig", "dataset")


EXPERIMENT = Experiment("e2e-datasets", ("distkv-llm Fig 8",), "serving.schema.json", run, default_run_id,
                        plot=plot, claims=claims)
