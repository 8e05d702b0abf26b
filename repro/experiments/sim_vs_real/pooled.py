"""sim-vs-real's pooled arm: the same requests served for real by several instances on Ray (an actor and a core
each, KV pooled or not) and simulated with the cost model calibrated on this machine just before.

Systems: Infinite-LLM (pooling on: a request's rBlocks may sit on other instances, remote MicroAttention every
layer, KV moves, gManager rounds) and vLLM-M (pooling off: a request that outgrows its instance is preempted and
recomputed, one that no instance holds is rejected), on the same instances with the same rBlocks.

The workload is a trace scaled by a fixed rule (workloads/scaling.py): the trace's `quantile` length fills one
instance, so the requests above it outgrow one. Rates: multiples of the higher of the two systems' saturation
rates, each measured first by serving every request at once. Clock: the wall clock (the instances are processes
of their own). Calibration (ray_calibration.py, every Ray arm's), taken before each rate: `repro profile` of one core in CPU time (the layers, the
attention kernel), the step overhead of the Ray engine's own steps on one instance alone (ray_steps.py; the
in-process engine's is lower) and the gloo link between two processes (calibration/profile_link.py),
the link the simulator's remote MicroAttention and KV moves travel; and, from Infinite-LLM's saturation run, what
the Ray engine's pooling costs beyond the KV reads and the link: how long a debtor step waits for a creditor
serving it (the serving thread's wall time, its core shared with the creditor's own step), what that costs the
creditor's core (its CPU time), and one control-plane call on a peer that waits for the reply (reservations,
reserved blocks, reclaim asks), which the simulator charges per call its control plane makes; and, before
everything, how much more CPU a step takes while every instance computes (co_run.py: the instances share the
machine's caches) times how much of a core a loop gets in the saturation runs (its compute phase's wall over CPU
time), which the simulator applies to a step by the share of the others computing as it starts. On a
shared machine the wall-clock runs are slower than a CPU-time calibration predicts by what the load takes: the load
average is kept before and after every run.
"""
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import ray
import torch

from reference_impl.backends.ray import init_ray
from reference_impl.backends.ray.serving import RayServer, engine_config
from reference_impl.calibration.links import GLOO
from reference_impl.calibration.model import CalibratedPerfModel
from reference_impl.control.gmanager import GManagerConfig
from reference_impl.model.llama import random_model
from reference_impl.serving.records import REJECTED
from reference_impl.systems.catalog import design
from reference_impl.systems.registry import system_config
from repro.load import load_1m
from repro.progress import progress
from repro.experiments.sim_vs_real.calibration import CPU_HARDWARE
from repro.experiments.sim_vs_real.points import make_points, run_summary
from repro.experiments.sim_vs_real.ray_calibration import (RAY_GMANAGER_INTERVAL_S, RayCalibration, co_run_record,
                                                           costs_text, engine_costs, ray_config_for, sim_config)
from repro.experiments.sim_vs_real.ray_runs import (measure_saturation, rates_from, saturation_text,
                                                   served_and_simulated, served_summary)

SYSTEMS = ("infinite-llm", "vllm-m")


@dataclass(frozen=True, slots=True)
class PooledSetup:
    """The cluster both systems run on, for real and simulated."""

    num_instances: int
    blocks_per_instance: int
    block_size: int
    max_batch_size: int
    gmanager_interval_s: float = RAY_GMANAGER_INTERVAL_S



def _sim_counts(result) -> dict:
    steps: dict[str, int] = {}
    for inst in result.step_inst:
        steps[str(inst)] = steps.get(str(inst), 0) + 1
    return {"num_steps": dict(sorted(steps.items())), "num_moved_blocks": result.num_moved_blocks,
            "num_peer_calls": result.num_peer_calls,
            "num_preemptions": sum(r.num_preemptions for r in result.requests),
            "num_rejected": sum(r.status == REJECTED for r in result.requests)}


def _max_tput_ratio(points: list[dict], side: str) -> float | None:
    best = {s: max((p[f"{side}_output_tok_s"] for p in points if p["system"] == s), default=None) for s in SYSTEMS}
    if not best[SYSTEMS[0]] or not best[SYSTEMS[1]]:
        return None
    return best[SYSTEMS[0]] / best[SYSTEMS[1]]


def run_pooled_arm(spec, make_requests, setup: PooledSetup, *, multipliers, repeats: int, seed: int, quick: bool,
                   folder: Path, log, rates=None) -> dict:
    """Measured and simulated runs of both systems at every rate; `make_requests(rate)` gives the workload."""
    model = random_model(spec, seed, torch.float32)
    threads_before = torch.get_num_threads()
    ray_config = ray_config_for(setup.num_instances, len(SYSTEMS))
    configs = {s: engine_config(design(s), setup.num_instances, setup.blocks_per_instance, setup.block_size,
                                max_batch_size=setup.max_batch_size, seed=seed) for s in SYSTEMS}

    def measure(system: str, requests) -> tuple[dict, dict]:
        return served_summary(*server.serve(requests, configs[system], seed=seed))

    loads = [load_1m()]
    burst = make_requests(float("inf"))
    # the engines' gManagers run Algorithm 1 on this machine's cost model (the first calibration), as the simulated
    # gManager does on each rate's
    gm_config = GManagerConfig(interval_s=setup.gmanager_interval_s)
    started = init_ray(ray_config)
    server, calibration = None, None
    try:
        calibration = RayCalibration(spec, model, ray_config, label="pooled arm", num_instances=setup.num_instances,
                                     max_batch=setup.max_batch_size, block_size=setup.block_size, burst=burst,
                                     seed=seed, quick=quick, folder=folder)
        first = calibration.calibrated(-1, 0.0)
        perf = CalibratedPerfModel.for_setting(model=spec.name, gpu=CPU_HARDWARE, link=GLOO, coefficients_path=first)
        server = RayServer(model, ray_config, gmanager_config=gm_config, perf_model=perf)
        co_run = calibration.co_run(log)
        saturation = measure_saturation(measure, SYSTEMS, burst)
        costs = engine_costs(saturation, co_run)
        log(f"  pooled arm: {costs_text(costs, co_run, saturation)}")
        rates = rates_from(saturation, rates, multipliers)
        log(f"  pooled arm, {setup.num_instances} Ray instances of {setup.blocks_per_instance} rBlocks: saturation "
            f"{saturation_text(saturation, rates)}; load {loads[-1]}")
        runs = []
        for repeat, rate in progress([(k, r) for k in range(repeats) for r in rates], desc="pooled arm", unit="rate"):
            requests = make_requests(rate)
            base = sim_config(configs[SYSTEMS[0]], gm_config, spec.name, calibration.calibrated(repeat, rate, costs))
            for system in SYSTEMS:
                measured, stats, sim, load_before = served_and_simulated(measure, system, requests,
                                                                         system_config(system, base), loads)
                predicted = {**asdict(run_summary(sim)), **_sim_counts(sim)}
                runs.append({"system": system, "num_instances": setup.num_instances,
                             "pooling": configs[system].pooling, "repeat": repeat, "rate_per_s": rate,
                             "measured": measured, "predicted": predicted, "engine": stats,
                             "loadavg_1m_before": load_before, "loadavg_1m_after": loads[-1]})
                log(f"  pooled {system:<12} rate {rate:g}/s: measured {measured['output_tok_s']:.1f} tok/s, "
                    f"predicted {predicted['output_tok_s']:.1f}; steps {measured['num_steps']} vs "
                    f"{predicted['num_steps']}; step {stats['step_ms']:.1f} ms (control {stats['control_ms']:.1f}, "
                    f"wait {stats['wait_ms']:.1f}, messaging {stats['messaging_ms']:.1f}); load {loads[-1]}")
    finally:
        for part in (server, calibration):
            if part is not None:
                part.close()
        torch.set_num_threads(threads_before)
        if started:
            ray.shutdown()
    points = make_points(runs)
    for p in points:
        p.update(num_instances=setup.num_instances, pooling=configs[p["system"]].pooling)
    return {"setup": asdict(setup), "systems": list(SYSTEMS),
            "co_run": co_run_record(co_run, saturation, costs), "saturation": saturation,
            "rates_per_s": list(rates), "calibrations": calibration.records, "runs": runs, "points": points,
            "measured_max_tput_ratio": _max_tput_ratio(points, "measured"),
            "predicted_max_tput_ratio": _max_tput_ratio(points, "predicted"),
            "loadavg_1m": {"min": min(loads), "max": max(loads), "median": float(np.median(loads))}}
