"""Shared by the serving experiments (e2e, e2e-datasets): rate grids, one simulated point, curve summaries."""
from dataclasses import asdict, dataclass

import numpy as np

from reference_impl.backends.sim import simulate
from reference_impl.errors import InputError
from reference_impl.perf_model import InstanceLoad, causal_prefill_pairs, step_time_s
from reference_impl.sim.config import SimConfig, blocks_per_instance, perf_model
from reference_impl.sim.systems import system_config
from workloads import generate
from workloads.generate import SourceOptions

LINK_DEFAULT = "inter-node"  # Vidur's measured A100 DGX send/recv; the paper's "125MB/s" is a sweep point


@dataclass(frozen=True, slots=True)
class Point:
    system: str
    rate_per_s: float
    num_requests: int
    num_finished: int
    num_rejected: int
    num_unfinished: int
    output_tok_s: float
    window_tok_s: float
    total_tok_s: float
    mean_norm_latency_s: float | None
    mean_latency_s: float | None
    mean_ttft_s: float | None
    makespan_s: float
    num_preemptions: int
    num_moved_blocks: int
    sim_wall_s: float


def workload(*, trace_id=None, dataset_id=None, num_requests: int, rate_per_s: float, seed: int, source: str):
    return generate(trace_id=trace_id, dataset_id=dataset_id, num_requests=num_requests, rate_per_s=rate_per_s,
                    seed=seed, options=SourceOptions(source=source))


def nominal_rate_per_s(config: SimConfig, requests) -> float:
    """A rough saturation rate of the cluster for these lengths, from the cost model alone: per instance, a
    request costs its prefill plus its share of decode steps at the largest batch that fits. Only a scale
    for the rate grid (the same rates are used for every system)."""
    model = perf_model(config)
    prompt = float(np.mean([r.prompt_len for r in requests]))
    output = float(np.mean([r.output_len for r in requests]))
    context = prompt + output / 2
    capacity = blocks_per_instance(config) * config.block_size
    batch = int(max(1, min(config.max_batch_size, capacity // max(1.0, context))))
    prefill_s = step_time_s(model, InstanceLoad(batch_size=0, attn_kv_tokens=0, prefill_tokens=int(prompt),
                                                prefill_attn_pairs=causal_prefill_pairs(int(prompt))))
    decode_s = step_time_s(model, InstanceLoad(batch_size=batch, attn_kv_tokens=int(batch * context)))
    return config.num_instances / (prefill_s + output * decode_s / batch)


def run_point(system: str, base: SimConfig, requests, rate_per_s: float) -> Point:
    import time

    config = system_config(system, base)
    start = time.perf_counter()
    result = simulate(config, requests)
    wall_s = time.perf_counter() - start
    s = result.summary()
    return Point(system, rate_per_s, s.num_requests, s.num_finished, s.num_rejected, s.num_unfinished,
                 s.output_tok_s, s.window_tok_s, s.total_tok_s, s.mean_norm_latency_s, s.mean_latency_s, s.mean_ttft_s,
                 s.makespan_s, sum(r.num_preemptions for r in result.requests), result.num_moved_blocks,
                 round(wall_s, 3))


def run_curves(systems, base: SimConfig, make_requests, rates_per_s, log, label: str) -> list[dict]:
    """Every system at every rate on the same requests (lengths fixed by the seed, arrivals scaled)."""
    points = []
    for rate in rates_per_s:
        requests = make_requests(rate)
        for system in systems:
            p = run_point(system, base, requests, rate)
            log(f"  {label} {system:<13} rate {rate:8.4f}/s  {p.output_tok_s:9.1f} out tok/s  "
                f"finished {p.num_finished}/{p.num_requests}  ({p.sim_wall_s:.1f} s)")
            points.append(asdict(p))
    return points


def max_throughput_ratio(points: list[dict], system: str, baseline: str) -> float | None:
    best = {s: max((p["output_tok_s"] for p in points if p["system"] == s), default=0.0) for s in (system, baseline)}
    return best[system] / best[baseline] if best[baseline] > 0 else None


def rate_grid(nominal: float, multipliers) -> list[float]:
    return [float(f"{nominal * m:.4g}") for m in multipliers]


def param(params, key: str, cast, default):
    raw = params.extra.get(key)
    if raw is None:
        return default
    try:
        return cast(raw)
    except (TypeError, ValueError):
        raise InputError(f"--param {key}={raw!r} is not a valid {cast.__name__}") from None
