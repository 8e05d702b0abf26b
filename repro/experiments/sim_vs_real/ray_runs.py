"""What the Ray arms of sim-vs-real keep of a served run, their saturation measurement (every request at once on
each system's warmed-up engines), and the two-design arms' runner (pd, Llumnix, LoongServe, Lamina)."""
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import ray
import torch

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


def served_and_simulated(measure, system: str, requests, sim_config, loads: list) -> tuple:
    """`system` served for real on `requests` (`measure`) and simulated on `sim_config`: (measured, engine stats, the
    simulated run, the load average before); the load average after is appended to `loads`."""
    from reference_impl.systems.run import simulate
    from repro.load import load_1m

    load_before = load_1m()
    measured, stats = measure(system, requests)
    loads.append(load_1m())
    return measured, stats, simulate(sim_config, requests), load_before


def rates_from(saturation: dict, rates, multipliers) -> tuple:
    """`rates` where given, else `multipliers` of the fastest system's saturation rate (3 significant digits)."""
    top = max(s["rate_per_s"] for s in saturation.values())
    return tuple(rates) if rates else tuple(float(f"{top * m:.3g}") for m in multipliers)


def saturation_text(saturation: dict, rates) -> str:
    return (", ".join(f"{s} {v['output_tok_s']:.1f} tok/s ({v['rate_per_s']:.3g} req/s)" for s, v in saturation.items())
            + f"; rates {', '.join(f'{r:g}' for r in rates)}")


def _ranks(points: list[dict], side: str, systems) -> dict:
    """Designs best first by max output tok/s over the rates and by median TTFT over the rates."""
    best = {s: max((p[f"{side}_output_tok_s"] or 0.0) for p in points if p["system"] == s) for s in systems}
    ttft = {s: float(np.median([p[f"{side}_mean_ttft_s"] for p in points
                                if p["system"] == s and p[f"{side}_mean_ttft_s"] is not None] or [np.inf]))
            for s in systems}
    return {"output_tok_s": sorted(systems, key=lambda s: -best[s]), "mean_ttft_s": sorted(systems, key=ttft.get)}


def ranking(points: list[dict]) -> dict:
    """Whether the simulator orders the designs of `points` as the real runs do (max output tok/s; median TTFT)."""
    systems = tuple(dict.fromkeys(p["system"] for p in points))
    measured, predicted = _ranks(points, "measured", systems), _ranks(points, "predicted", systems)
    return {"measured": measured, "predicted": predicted,
            "same": {m: measured[m] == predicted[m] for m in measured}}


@dataclass(frozen=True, slots=True)
class TwoDesignSetup:
    """`num_instances` Ray instances of `blocks_per_instance` rBlocks each, serving two designs in turn."""

    blocks_per_instance: int
    block_size: int
    max_batch_size: int
    num_instances: int = 2


def _kinds(stats: dict) -> str:
    """The steps that prefilled sequence-parallel or asked another instance to attend, where there were any."""
    kinds = [f"{stats[f'num_{k}_steps']} {k} at {stats[f'{k}_step_ms']:.1f} ms" for k in ("split", "remote")
             if stats[f"num_{k}_steps"]]
    return f" ({', '.join(kinds)})" if kinds else ""


def run_designs(spec, make_requests, setup, engine_runs: dict, simulated, *, label: str, multipliers, repeats: int,
                seed: int, quick: bool, folder: Path, log, rates=None, extra=None) -> dict:
    """Measured and simulated runs of each design of `engine_runs` (system -> (EngineConfig, serve kwargs)) on the
    same Ray instances and requests at every rate; `simulated(base, perf, requests) -> {system: SimConfig}` on the
    calibration taken just before each rate (`base` the pooled arm's SimConfig of the last system's config: its
    calibration, ray_calibration.RayCalibration, the pooled arm's, with the engine costs measured in these designs'
    saturation runs), and `extra(system, base, perf, requests) -> dict` what a run's record adds."""
    from reference_impl.backends.ray import init_ray
    from reference_impl.backends.ray.serving import RayServer
    from reference_impl.calibration.links import GLOO
    from reference_impl.calibration.model import CalibratedPerfModel
    from reference_impl.control.gmanager import GManagerConfig
    from reference_impl.model.llama import random_model
    from repro.experiments.sim_vs_real.calibration import CPU_HARDWARE
    from repro.experiments.sim_vs_real.points import make_points
    from repro.experiments.sim_vs_real.ray_calibration import (RAY_GMANAGER_INTERVAL_S, RayCalibration,
                                                               co_run_record, costs_text, engine_costs,
                                                               ray_config_for, sim_config)
    from repro.load import load_1m
    from repro.progress import progress

    systems = tuple(engine_runs)
    model = random_model(spec, seed, torch.float32)
    threads_before = torch.get_num_threads()
    ray_config = ray_config_for(setup.num_instances, len(systems))
    gm_config = GManagerConfig(interval_s=RAY_GMANAGER_INTERVAL_S)

    def measure(system: str, requests) -> tuple[dict, dict]:
        config, serving = engine_runs[system]
        return served_summary(*server.serve(requests, config, seed=seed, **serving))

    loads, burst = [load_1m()], make_requests(float("inf"))

    def perf_of(path: Path):
        return CalibratedPerfModel.for_setting(model=spec.name, gpu=CPU_HARDWARE, link=GLOO, coefficients_path=path)

    started = init_ray(ray_config)
    server, calibration = None, None
    try:
        calibration = RayCalibration(spec, model, ray_config, label=label, num_instances=setup.num_instances,
                                     max_batch=setup.max_batch_size, block_size=setup.block_size, burst=burst,
                                     seed=seed, quick=quick, folder=folder, first=1000)
        server = RayServer(model, ray_config, gmanager_config=gm_config,
                           perf_model=perf_of(calibration.calibrated(-1, 0.0)))
        co_run = calibration.co_run(log)
        saturation = measure_saturation(measure, systems, burst)
        costs = engine_costs(saturation, co_run)
        rates = rates_from(saturation, rates, multipliers)
        log(f"  {label}: {costs_text(costs, co_run, saturation)}")
        log(f"  {label}: saturation {saturation_text(saturation, rates)}; load {loads[-1]}")
        runs = []
        for repeat, rate in progress([(k, r) for k in range(repeats) for r in rates], desc=label, unit="rate"):
            requests = make_requests(rate)
            path = calibration.calibrated(repeat, rate, costs)
            perf = perf_of(path)
            base = sim_config(engine_runs[systems[-1]][0], gm_config, spec.name, path)
            sims = simulated(base, perf, requests)
            for system in systems:
                measured, stats, sim, load_before = served_and_simulated(measure, system, requests, sims[system],
                                                                         loads)
                predicted = asdict(run_summary(sim))
                runs.append({"system": system, "num_instances": setup.num_instances, "repeat": repeat,
                             "rate_per_s": rate, "measured": measured, "predicted": predicted, "engine": stats,
                             "loadavg_1m_before": load_before, "loadavg_1m_after": loads[-1],
                             **(extra(system, base, perf, requests) if extra else {})})
                log(f"  {label} {system:<12} rate {rate:g}/s: measured {measured['output_tok_s']:.1f} tok/s, "
                    f"predicted {predicted['output_tok_s']:.1f}; TTFT {1e3 * (measured['mean_ttft_s'] or 0):.0f} vs "
                    f"{1e3 * (predicted['mean_ttft_s'] or 0):.0f} ms; step {stats['step_ms']:.1f} ms{_kinds(stats)}; "
                    f"load {loads[-1]}")
    finally:
        for part in (server, calibration):
            if part is not None:
                part.close()
        torch.set_num_threads(threads_before)
        if started:
            ray.shutdown()
    points = make_points(runs)
    return {"setup": asdict(setup), "systems": list(systems), "co_run": co_run_record(co_run, saturation, costs),
            "saturation": saturation, "rates_per_s": list(rates), "calibrations": calibration.records,
            "runs": runs, "points": points, "ranking": ranking(points),
            "loadavg_1m": {"min": min(loads), "max": max(loads), "median": float(np.median(loads))}}
