"""A designs-experiment point: run_point's record plus what says why a design wins or loses there (the median
TTFT and TPOT beside the point's p99s, and the counters of the run), or the error that stopped the design.

Counters (`counters` of a point, whole run, units in names): the share of instance step time spent in steps that
carried prompt tokens (`prefill_time_share`), the KV bytes creditors read for remote decode queries
(`remote_attn_kv_bytes`, DistAttention's pooled memory at work), the KV bytes the control plane moved between
instances (`kv_moved_bytes`: Infinite-LLM's moves and swaps), and every counter the design's policy reports
(ServingRun.design_counters: KV hops, migration bytes and pauses, ...). Preemptions and rejections are the
point's own fields."""
import time
from dataclasses import replace
from functools import partial

from reference_impl.serving.points import ServingPoint
from reference_impl.serving.records import summarize_records
from reference_impl.systems.run import simulator
from reference_impl.systems.registry import system_config


def design_config(system: str, base, knobs: dict | None = None):
    """`base` as `system` runs it, with its design knobs from `knobs` (design name -> knobs) where given."""
    mine = (knobs or {}).get(system)
    return system_config(system, base if mine is None else replace(base, design_knobs=mine))


def design_runner(knobs: dict):
    """The PointTask.runner of a group whose designs run with these knobs (design name -> knobs)."""
    return partial(run_design_point, knobs=knobs) if knobs else run_design_point


def run_design_point(task, knobs: dict | None = None) -> dict:
    """PointTask.runner of the designs experiment (`task.requests` built; `knobs`: design_config's). A simulation
    that raises gives a point that served nothing, with the error as `error` text: the design is reported failed
    in that group, the run goes on."""
    start = time.perf_counter()
    try:
        config = design_config(task.system, task.base, knobs)
        sim = simulator(config, task.requests, steady_only=task.steady_only)
        result = sim.run()
    except Exception as exc:  # noqa: BLE001 - reported in the result, per design and group
        point = ServingPoint.of(task.system, task.rate_per_s, summarize_records(()),
                                wall_s=time.perf_counter() - start, seed=task.seed).to_dict()
        return {**point, "error": f"{type(exc).__name__}: {exc}"}
    point = ServingPoint.of_result(task.system, task.rate_per_s, result, wall_s=time.perf_counter() - start,
                                   seed=task.seed).to_dict()
    summary = result.summary()
    return {**point, "p50_ttft_s": _s(summary.p50_ttft_ms), "p50_tpot_s": _s(summary.p50_tpot_ms),
            "counters": counters(sim, result)}


def counters(sim, result) -> dict:
    meter, model = sim.backend.meter, sim.backend.model
    token_bytes = model.memory.kv_bytes_per_token_per_gpu * model.tp * model.pp  # all layers, whole instance
    return {"prefill_time_share": meter.prefill_step_s / meter.step_s if meter.step_s else 0.0,
            "remote_attn_kv_bytes": meter.remote_kv_tokens * token_bytes,
            "kv_moved_bytes": result.num_moved_blocks * sim.config.engine.block_size * token_bytes,
            **{k: float(v) for k, v in sorted(result.design_counters.items())}}


def _s(ms: float | None) -> float | None:
    return None if ms is None else ms / 1e3
