"""What the Ray arms of sim-vs-real (pooled.py, lamina_arm.py) keep of a served run, and their saturation
measurement: every request at once on each system's warmed-up engines."""
from dataclasses import asdict

from reference_impl.backends.ray.serving import instance_stats
from reference_impl.serving.records import REJECTED
from repro.experiments.sim_vs_real.points import run_summary

WARM_UP_REQUESTS = 4


def served_summary(run, stats) -> tuple[dict, dict]:
    """A Ray run's summary (steps, preemptions and rejections included) and its engines' stats."""
    engine = instance_stats(stats)
    summary = {**asdict(run_summary(run)), "num_steps": engine.pop("num_steps"),
               "num_preemptions": sum(r.num_preemptions for r in run.requests),
               "num_rejected": sum(r.status == REJECTED for r in run.requests)}
    return summary, engine


def measure_saturation(measure, systems, burst) -> dict:
    """`measure(system, requests) -> (summary, engine)` on a few of `burst`'s requests per system (workers, imports,
    the data plane: the engines stay warm), then on all of them at once: per system its output tok/s, its rate
    (finished over makespan) and its engines' stats."""
    for system in systems:
        measure(system, burst[: min(WARM_UP_REQUESTS, len(burst))])
    saturation = {}
    for system in systems:
        summary, engine = measure(system, burst)
        saturation[system] = {"output_tok_s": summary["output_tok_s"],
                              "rate_per_s": summary["num_finished"] / summary["makespan_s"], "engine": engine}
    return saturation
