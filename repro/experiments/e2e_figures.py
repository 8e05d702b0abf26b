"""e2e's latency figures beside Fig 10's curves (repro/serving/latency_figures.py): TTFT and TPOT against the rate
for each panel from the stored points, and the serving detail of the first Fig 10a group re-simulated at the run's
seed at each of its rates (each run checked against the stored point of that rate: steady-state rate equal)."""
from reference_impl.sim.config import sim_engine
from reference_impl.systems.registry import cluster, system_config
from reference_impl.systems.run import simulate
from repro.serving.latency_figures import detail_rate, latency_vs_rate, serving_detail
from repro.serving.tasks import workload


def resimulate(result: dict, group: dict) -> tuple[dict, int]:
    """(system -> rate -> ServingRun of `group` at the run's first seed, how many differ from the stored points)."""
    data, seed = result["data"], result["params"]["seed"]
    base = cluster(group["model"], data["gpu"], group["num_gpus"], link=data["link"], engine=sim_engine(seed=seed))
    systems = list(dict.fromkeys(p["system"] for p in group["points"]))
    runs, differ = {s: {} for s in systems}, 0
    for rate in group["rates_per_s"]:
        requests = workload(trace_id=group["trace_id"], num_requests=group["num_requests"], rate_per_s=rate,
                            seed=seed, source=data["source"])
        for system in systems:
            run = runs[system][rate] = simulate(system_config(system, base), requests)
            stored = [p for p in group["points"] if (p["system"], p["rate_per_s"], p["seed"]) == (system, rate, seed)]
            differ += bool(stored) and stored[0]["steady_output_tok_s"] != run.summary().steady_output_tok_s
    return runs, differ


def plot_latency(result: dict, figures_dir: str, prefix: str = "infinite-llm-fig") -> list[str]:
    groups, run_id = result["data"]["groups"], result["run_id"]
    written = []
    for panel in sorted({g["panel"] for g in groups}):
        chosen = [g for g in groups if g["panel"] == panel]
        written += latency_vs_rate(chosen, figures_dir, f"{prefix}{panel}-latency",
                                   f"Fig {panel}'s groups, {run_id}: median over {len(chosen[0]['seeds'])} seeds, "
                                   f"band min-max")
    first = next((g for g in groups if g["panel"] == "10a"), None)
    if first is not None:
        runs, differ = resimulate(result, first)
        check = "equal to the stored points" if not differ else f"{differ} runs DIFFER from the stored points"
        written += serving_detail(runs, detail_rate(first), figures_dir, f"{prefix}{first['panel']}-serving",
                                  f"trace {first['trace_id']}, {first['model']}, {first['num_gpus']} GPUs, "
                                  f"{first['num_requests']} requests, seed {result['params']['seed']} of {run_id} "
                                  f"re-simulated ({check})")
    return written
