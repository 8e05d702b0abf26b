"""e2e (infinite-llm Fig 10a/10b): throughput-latency curves over request rates on the simulated A100 cluster.

Fig 10a: traces 0-2 (short) on LLaMA2-7B instances of one GPU, at two instance counts, against vLLM-M.
Fig 10b: traces 3-8 (long) against vLLM-S; each trace runs on the (model, GPUs) row of distkv-llm Table 2
whose range it matches (200K: 7B/2, 280K: 13B/4, 600K: 70B/8, 480K: 13B/8, 1200K: 7B/16, 2000K: 7B/32).
The same requests and rates go to every system; rates are multiples of a cost-model estimate of the
cluster's saturation rate; the points run in one process per core (`--param workers=N`).
The link sweep reruns one point per trace of Fig 10a with other inter-instance links.
"""
from repro.experiments.base import ClaimRow, Experiment, default_run_id
from repro.experiments.serving import (LINK_DEFAULT, PointTask, curve_tasks, default_workers, max_throughput_ratio,
                                       nominal_rate_per_s, param, rate_grid, run_tasks, workload)
from reference_impl.sim.systems import cluster

GPU = "A100-80GB-SXM"
LONG_SETTINGS = {3: ("llama2-7b", 2), 4: ("llama2-13b", 4), 5: ("llama2-70b", 8), 6: ("llama2-13b", 8),
                 7: ("llama2-7b", 16), 8: ("llama2-7b", 32)}
FULL = dict(short_traces=(0, 1, 2), instance_counts=(4, 8), long_traces=(3, 4, 5, 6, 7, 8),
            short_requests=300, long_requests=12, multipliers=(0.5, 1.0, 2.0, 4.0),
            sweep_links=("intra-node", "inter-node", "0.125"))
QUICK = dict(short_traces=(0,), instance_counts=(4,), long_traces=(3,), short_requests=100, long_requests=10,
             multipliers=(0.5, 2.0), sweep_links=("0.125",))


def groups(size: dict):
    for trace in size["short_traces"]:
        for n in size["instance_counts"]:
            yield dict(trace_id=trace, panel="10a", model="llama2-7b", num_gpus=n, baseline="vllm-m",
                       num_requests=size["short_requests"])
    for trace in size["long_traces"]:
        model, gpus = LONG_SETTINGS[trace]
        yield dict(trace_id=trace, panel="10b", model=model, num_gpus=gpus, baseline="vllm-s",
                   num_requests=size["long_requests"])


def run(params, log) -> dict:
    if params.backend == "ray":  # served for real by Ray actors: repro/experiments/serving_ray.py
        from repro.experiments.serving_ray import run_on_ray
        return run_on_ray(params, log, list(groups(QUICK if params.quick else FULL)))
    if params.backend == "vllm":  # real vLLM-M vs our local engine at CPU scale: baselines/vllm_e2e.py
        from baselines.vllm_e2e import run as run_real
        return run_real(params, log)
    size = dict(QUICK if params.quick else FULL)
    size["short_requests"] = param(params, "short_requests", int, size["short_requests"])
    size["long_requests"] = param(params, "long_requests", int, size["long_requests"])
    link = params.extra.get("link", LINK_DEFAULT)
    source = params.extra.get("source", "fitted")
    pending, tasks = [], []  # (group, number of curve tasks, sweep links), in task order
    for g in groups(size):
        base = cluster(g["model"], GPU, g["num_gpus"], link=link, seed=params.seed)
        make = lambda rate, g=g: workload(trace_id=g["trace_id"], num_requests=g["num_requests"], rate_per_s=rate,
                                          seed=params.seed, source=source)
        rates = rate_grid(nominal_rate_per_s(base, make(1.0)), size["multipliers"])
        label = f"trace {g['trace_id']} {g['model']} {g['num_gpus']} GPUs"
        log(f"{label}: rates {rates}")
        curve = curve_tasks(("infinite-llm", g["baseline"]), base, make, rates, label)
        links = size["sweep_links"] if g["panel"] == "10a" and g["num_gpus"] == size["instance_counts"][0] else ()
        sweep_tasks = [PointTask("infinite-llm", cluster(g["model"], GPU, g["num_gpus"], link=sweep_link,
                                                         seed=params.seed), curve[-1].requests, rates[-1],
                                 f"{label} link {sweep_link}") for sweep_link in links]
        tasks += curve + sweep_tasks
        pending.append(({**g, "num_instances": base.num_instances, "tp": base.tp, "rates_per_s": rates},
                        len(curve), links))
    results = iter(run_tasks(tasks, log, default_workers(params)))
    out, sweep = [], []
    for g, num_curve, links in pending:
        points = [next(results) for _ in range(num_curve)]
        out.append({**g, "points": points, "max_tput_ratio": max_throughput_ratio(points, "infinite-llm",
                                                                                  g["baseline"])})
        rate = g["rates_per_s"][-1]
        for sweep_link in links:
            p = next(results)
            sweep.append({"trace_id": g["trace_id"], "link": sweep_link, "rate_per_s": rate,
                          "output_tok_s": p["output_tok_s"], "mean_norm_latency_s": p["mean_norm_latency_s"],
                          "baseline_output_tok_s": max(q["output_tok_s"] for q in points
                                                       if q["system"] == g["baseline"] and q["rate_per_s"] == rate)})
    return {"gpu": GPU, "link": link, "source": source, "groups": out, "link_sweep": sweep}


def claims(results) -> list[ClaimRow]:
    from repro.experiments.figures import main_result
    result = main_result(_not_vllm(results))
    data = result["data"]
    rows = []
    for claim_id, panel, paper, low, high in (("e2e-vs-vllm-m", "10a", "1.35x-1.73x", 1.35, 1.73),
                                               ("e2e-vs-vllm-s", "10b", "1.4x-3.4x", 1.4, 3.4)):
        for g in (g for g in data["groups"] if g["panel"] == panel):
            ratio = g["max_tput_ratio"]
            note = "" if ratio is None or low <= ratio <= high else _why(g)
            rows.append(ClaimRow(claim_id, f"max tput ratio, trace {g['trace_id']}, {g['num_gpus']} GPUs "
                                 f"({result['run_id']})", paper, low, high, ratio, "x", note))
    return rows


def _why(g) -> str:
    inf = [p for p in g["points"] if p["system"] == "infinite-llm"]
    base = [p for p in g["points"] if p["system"] == g["baseline"]]
    return (f"simulated; {g['baseline']} rejected {max(p['num_rejected'] for p in base)} requests, "
            f"Infinite-LLM moved {max(p['num_moved_blocks'] for p in inf)} blocks at most")


def plot(results, figures_dir) -> list[str]:
    from repro.experiments.figures import main_result
    from repro.experiments.serving_plots import plot_curves
    return plot_curves(main_result(_not_vllm(results))["data"]["groups"], figures_dir, "infinite-llm-fig", "trace")


def _not_vllm(results):
    """Fig 10 and its claims: real-vLLM CPU runs (panel real-cpu) only when there is nothing else."""
    return [r for r in results if r["params"]["backend"] != "vllm"] or results


EXPERIMENT = Experiment("e2e", ("infinite-llm Fig 10a", "infinite-llm Fig 10b"), "serving.schema.json", run,
                        default_run_id, plot=plot, claims=claims, backends=("sim", "ray", "vllm"))
