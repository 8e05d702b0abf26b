"""The serving experiments on `--backend ray`: the same groups, traces and systems as on the simulator, served
for real, against the clock, by Ray actors running a model (default the built-in `tiny`, on CPU).

A real run cannot hold the traces' lengths on a CPU, so each group's lengths are scaled so that its longest
request has `max_tokens` tokens, and an instance holds `capacity_ratio` times that longest request (below 1:
the long requests outgrow one instance, which is what KV pooling is for). Rates are real requests per second.
One seed; the summary and point record are the simulator's (reference_impl/sim/metrics.py). `num_gpus` of a
group is the number of instances run.
"""
import math
import time

from repro.experiments.params import Param, float_list
from repro.experiments.serving import workload
from repro.progress import progress
from reference_impl.serving.points import ServingPoint, best_ratio
from workloads import Request

QUICK = dict(max_tokens=48, rates=(4.0,), max_instances=2, requests=6, num_groups=1)
FULL = dict(max_tokens=256, rates=(0.5, 1.0, 2.0), max_instances=4, requests=40, num_groups=None)
RAY = ("ray",)
RAY_PARAMS = (
    Param("model", str, "tiny", "model the Ray actors run", backends=RAY),
    Param("max_tokens", int, None, "longest request after scaling (256; 48 with --quick)", backends=RAY),
    Param("capacity_ratio", float, 0.75, "an instance's KV capacity over the longest request", backends=RAY),
    Param("block_size", int, 8, "tokens per KV block", backends=RAY),
    Param("rates", float_list, None, "request rates per second (0.5,1,2; 4 with --quick)", backends=RAY),
    Param("max_instances", int, None, "most instances a group runs (4; 2 with --quick)", backends=RAY),
    Param("requests", int, None, "requests per point (40; 6 with --quick)", backends=RAY),
    Param("cpus_per_instance", float, 0.5, "CPUs per Ray actor", backends=RAY),
    Param("gpus_per_instance", float, 0.0, "GPUs per Ray actor", backends=RAY),
)


def scaled(requests: list[Request], max_tokens: int) -> list[Request]:
    scale = max_tokens / max(r.prompt_len + r.output_len for r in requests)
    return [Request(r.req_id, r.arrival_s, max(1, round(r.prompt_len * scale)), max(1, round(r.output_len * scale)),
                    r.source) for r in requests]


def run_on_ray(params, log, groups: list[dict]) -> dict:
    """Data in serving.schema.json's shape for the given groups of an experiment."""
    from reference_impl.backends.ray import RayConfig, init_ray
    from reference_impl.backends.ray.serving import engine_config, serve
    from reference_impl.model import resolve_model
    from reference_impl.sequence import num_blocks_for

    size = QUICK if params.quick else FULL
    extra = params.extra
    get = lambda key, default: default if extra.get(key) is None else extra[key]  # noqa: E731
    model_spec = get("model", "tiny")
    max_tokens = get("max_tokens", size["max_tokens"])
    capacity_ratio = get("capacity_ratio", 0.75)
    block_size = get("block_size", 8)
    max_instances = get("max_instances", size["max_instances"])
    num_requests = get("requests", size["requests"])
    rates = list(get("rates", size["rates"]))
    ray_config = RayConfig(address=params.address, cpus_per_instance=get("cpus_per_instance", 0.5),
                           gpus_per_instance=get("gpus_per_instance", 0.0))
    model = resolve_model(model_spec, seed=params.seed)
    source = get("source", "fitted")
    started = init_ray(ray_config)
    out = []
    try:
        for g in groups[: size["num_groups"]]:
            num_instances = min(g["num_gpus"], max_instances)
            blocks = max(1, math.floor(capacity_ratio * num_blocks_for(max_tokens, block_size)))
            label = f"trace {g['trace_id']} on {num_instances} Ray instances of {blocks} rBlocks"
            points = []
            runs = [(rate, system) for rate in rates for system in ("infinite-llm", g["baseline"])]
            for rate, system in progress(runs, desc=f"trace {g['trace_id']} on Ray", unit="point"):
                requests = scaled(workload(trace_id=g["trace_id"], num_requests=num_requests, rate_per_s=rate,
                                           seed=params.seed, source=source), max_tokens)
                config = engine_config(system, num_instances, blocks, block_size, seed=params.seed)
                t0 = time.perf_counter()
                result = serve(model, requests, config, ray_config, seed=params.seed)
                p = ServingPoint.of_result(system, rate, result, wall_s=time.perf_counter() - t0,
                                           seed=params.seed).to_dict()
                log(f"  {label} {system:<13} rate {rate:g}/s  {p['output_tok_s']:8.1f} out tok/s  "
                    f"finished {p['num_finished']}/{p['num_requests']}, rejected {p['num_rejected']}")
                points.append(p)
            out.append({**g, "model": model_spec, "num_gpus": num_instances, "num_instances": num_instances, "tp": 1,
                        "num_requests": num_requests, "rates_per_s": rates, "points": points,
                        "max_tput_ratio": best_ratio(points, "infinite-llm", g["baseline"])})
    finally:
        if started:
            import ray
            ray.shutdown()
    on_gpu = ray_config.gpus_per_instance > 0
    link = "torch.distributed between the Ray actors (" + ("NCCL" if on_gpu else "gloo") + "; Ray: control only)"
    return {"gpu": f"Ray actors on {'GPU' if on_gpu else 'CPU'}", "link": link, "source": source, "groups": out}
