"""The serving experiments on `--backend ray`: real serving curves of the same systems, served against the wall
clock by Ray actors running a model (default the built-in `tiny`, on CPU), by the simulated curves' method
(repro/serving/curves.py): measured saturation, a grid of six rates from light load to past it, every rate with every
seed, curves extended to their plateau, max throughput read there, the one ServingPoint record.

At CPU scale a group's lengths are scaled by a fixed rule (workloads/scaling.py): the trace's `long_quantile`
length fills one instance of `instance_tokens` KV tokens, lengths capped at 1.5 instances; so the requests above
that quantile outgrow one instance whatever the sample, which is what KV pooling is for. The first probe serves
every request at once (the saturation search then refines it). Rates are real requests per second; a point is a
Ray engine of its system serving its requests (warm: one engine per system, reused from point to point; workers at
this process's priority), its load average and the instances' loop counters kept. `num_gpus` of a group is the number of instances run.
"""
import math
import os
import time
from functools import partial

import numpy as np

from repro.framework.params import Param, fraction, int_list
from repro.load import load_1m
from repro.serving.tasks import workload
from repro.serving.curves import CurveGroup, run_curves
from reference_impl.errors import InputError
from reference_impl.serving.points import ServingPoint
from reference_impl.sim.config import SimConfig, sim_engine
from workloads.scaling import max_tokens_for, scale_factor, scale_requests

QUICK = dict(requests=40, max_instances=2, seeds=1, traces=(1,))
FULL = dict(requests=120, max_instances=2, seeds=3, traces=(1,))
RAY = ("ray",)
RAY_PARAMS = (
    Param("model", str, "tiny", "model the Ray actors run", backends=RAY),
    Param("instance_tokens", int, 256, "KV tokens one instance holds; the trace's long_quantile length is scaled "
          "to it", backends=RAY),
    Param("long_quantile", fraction, 0.98, "the trace's length quantile that fills one instance", backends=RAY),
    Param("block_size", int, 8, "tokens per KV block", backends=RAY),
    Param("max_batch_size", int, 32, "the instances' batch cap", backends=RAY),
    Param("max_instances", int, None, "most instances a group runs (2)", backends=RAY),
    Param("requests", int, None, "requests per point (120; 40 with --quick)", backends=RAY),
    Param("ray_seeds", int, None, "seeds per point (3; 1 with --quick)", backends=RAY),
    Param("ray_traces", int_list, None, "trace ids served (1)", backends=RAY),
    Param("cpus_per_instance", float, 1.0, "CPUs per Ray actor", backends=RAY),
    Param("gpus_per_instance", float, 0.0, "GPUs per Ray actor", backends=RAY),
)



class RayPoint:
    """the curves' point runner on Ray: `task.system` serves `task.requests` on its engine, kept warm between
    points (backends/ray/serving.py RayServer)."""

    def __init__(self, server, num_instances: int, blocks: int, block_size: int, max_batch_size: int):
        self.server = server
        self.shape = (num_instances, blocks, block_size, max_batch_size)

    def __call__(self, task) -> dict:
        from reference_impl.backends.ray.serving import engine_run, instance_stats
        from reference_impl.systems.catalog import design

        num_instances, blocks, block_size, max_batch = self.shape
        chosen = engine_run(design(task.system), num_instances, blocks, block_size, max_batch_size=max_batch,
                            seed=task.seed)
        t0 = time.perf_counter()
        run, stats = self.server.serve(list(task.requests), chosen.config, seed=task.seed,
                                       placement=chosen.placement, homes=chosen.homes, moves=chosen.moves)
        point = ServingPoint.of_result(task.system, task.rate_per_s, run, wall_s=time.perf_counter() - t0,
                                       seed=task.seed).to_dict()
        return {**point, "loadavg_1m": load_1m(), "engine": instance_stats(stats)}


def _requests(trace_id: int, num_requests: int, source: str, factor: float, max_tokens: int, rate_per_s: float,
              seed: int):
    return scale_requests(workload(trace_id=trace_id, num_requests=num_requests, rate_per_s=rate_per_s, seed=seed,
                                   source=source), factor, max_tokens)


def run_on_ray(params, log, groups: list[dict]) -> dict:
    """Data in serving.schema.json's shape for the given groups of an experiment (those of `ray_traces`)."""
    from reference_impl.backends.ray import RayConfig, init_ray  # ray and torch: the simulated points' nodes lack them
    from reference_impl.backends.ray.serving import RayServer
    from reference_impl.model.resolve import resolve_model

    size = QUICK if params.quick else FULL
    extra = params.extra
    get = lambda key, default: default if extra.get(key) is None else extra[key]  # noqa: E731
    model_spec, source = get("model", "tiny"), get("source", "fitted")
    tokens, quantile = get("instance_tokens", 256), get("long_quantile", 0.98)
    block_size, max_batch = get("block_size", 8), get("max_batch_size", 32)
    max_instances, num_requests = get("max_instances", size["max_instances"]), get("requests", size["requests"])
    if tokens < 2 * block_size or max_instances < 1 or num_requests < 1 or max_batch < 1:
        raise InputError("--param instance_tokens must hold two blocks, and max_instances, requests and "
                         "max_batch_size must be at least 1")
    traces = tuple(get("ray_traces", size["traces"]))
    seeds = tuple(params.seed + i for i in range(max(1, get("ray_seeds", size["seeds"]))))
    cpus = get("cpus_per_instance", 1.0)
    # a private Ray holds both systems' warm engines (one serves at a time): logical CPUs for both
    num_cpus = max(os.cpu_count() or 1, math.ceil(2 * max_instances * cpus))
    ray_config = RayConfig(address=params.address, num_cpus=num_cpus, cpus_per_instance=cpus,
                           gpus_per_instance=get("gpus_per_instance", 0.0))
    model = resolve_model(model_spec, seed=params.seed)
    chosen = []  # one group per trace: the papers' cluster sizes of a trace all become `max_instances` here
    for g in groups:
        if g.get("trace_id") in traces and all(c["trace_id"] != g["trace_id"] for c in chosen):
            chosen.append(g)
    if not chosen:
        raise InputError(f"--param ray_traces {','.join(map(str, traces))} names no group of this experiment")
    max_tokens = max_tokens_for(tokens)
    blocks = tokens // block_size
    todo, server = [], RayServer(model, ray_config)
    for g in chosen:
        num_instances = min(g["num_gpus"], max_instances)
        factor = scale_factor(trace_id=g["trace_id"], instance_tokens=tokens, quantile=quantile, source=source)
        info = {**g, "model": model_spec, "num_gpus": num_instances, "num_requests": num_requests,
                "instance_tokens": tokens, "long_quantile": quantile, "scale_factor": factor,
                "max_tokens": max_tokens}
        base = SimConfig(engine=sim_engine(num_instances=num_instances, block_size=block_size, seed=params.seed))
        todo.append(CurveGroup(info, base, partial(_requests, g["trace_id"], num_requests, source, factor, max_tokens),
                               ("infinite-llm", g["baseline"]),
                               f"trace {g['trace_id']} on {num_instances} Ray instances of {blocks} rBlocks",
                               runner=RayPoint(server, num_instances, blocks, block_size, max_batch),
                               start_rate_per_s=float("inf")))
    loads = [load_1m()]
    started = init_ray(ray_config)
    try:
        out = run_curves(todo, seeds, log, None)  # one point at a time: each has the machine's cores
    finally:
        server.close()
        if started:
            import ray
            ray.shutdown()
    loads += [p["loadavg_1m"] for g in out for p in g["points"]]
    on_gpu = ray_config.gpus_per_instance > 0
    link = "torch.distributed between the Ray actors (" + ("NCCL" if on_gpu else "gloo") + "; Ray: control only)"
    return {"gpu": f"Ray actors on {'GPU' if on_gpu else 'CPU'}", "link": link, "source": source, "groups": out,
            "machine": {"cpu_count": os.cpu_count(), "loadavg_1m_min": min(loads), "loadavg_1m_max": max(loads),
                        "loadavg_1m_median": float(np.median(loads))}}
