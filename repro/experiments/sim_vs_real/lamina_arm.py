"""sim-vs-real's Lamina arm: Lamina's attention offloading served for real on Ray (systems/lamina/local.py: one
compute instance holding the weights and no KV, one memory instance holding every rBlock and computing its
attention, DistAttention's remote path) and Infinite-LLM on the same two Ray instances, the same requests; both
simulated with the cost model calibrated on this machine just before each rate (`repro profile` of one core in CPU
time and the gloo link between two processes, as the pooled arm's).

The simulated Lamina is the design's own pricing (systems/lamina/step_cost.py) with its memory devices stood in by
what the machine measured: one memory device per instance reading KV at the calibration's decode-attention rate,
the compute GPU's NIC at the gloo link's bandwidth (its largest measured message), the pool the memory instance's
rBlocks, every layer's round trip the gloo link's one-way latency (its smallest measured message) twice: the query
to the memory instance, the (out, lse) back (step_cost.round_trip_s; `message_latency_per_step_s` per decode step).
The prediction is of what ran: one micro-batch, as the real engine runs no rotational pipelining (lamina 5.1.1);
each run is also simulated with the design's micro-batches (`predicted_pipelined`), and the share the pipelining
would take off is kept.
"""
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import ray
import torch

from reference_impl.backends.ray import RayConfig, init_ray
from reference_impl.backends.ray.serving import RayServer, engine_config
from reference_impl.calibration.links import GLOO
from reference_impl.calibration.model import CalibratedPerfModel
from reference_impl.control.engine import EngineConfig
from reference_impl.control.gmanager import GManagerConfig
from reference_impl.model.llama import random_model
from reference_impl.sim.config import SimConfig
from reference_impl.systems.catalog import design
from reference_impl.systems.lamina.cluster import MICRO_BATCHES, LaminaKnobs
from reference_impl.systems.lamina.hardware import kv_bytes_per_token
from reference_impl.systems.lamina.local import lamina_engine_config, offload_placement
from reference_impl.systems.lamina.step_cost import round_trip_s
from reference_impl.systems.registry import system_config
from reference_impl.systems.run import simulate
from repro.experiments.sim_vs_real.calibration import CPU_HARDWARE, add_measured_link, calibrate, calibration_record
from repro.experiments.sim_vs_real.points import make_points, run_summary
from repro.experiments.sim_vs_real.pooled import CALIBRATION_CLOCK, PooledSetup, sim_config
from repro.experiments.sim_vs_real.ray_runs import measure_saturation, served_summary
from repro.load import load_1m
from repro.progress import progress

LAMINA, BASELINE = "lamina", "infinite-llm"
SYSTEMS = (LAMINA, BASELINE)
NUM_COMPUTE = 1  # instance 0 computes, instance 1 stands in for the memory devices
REAL_MICRO_BATCHES = 1  # the real engine runs no rotational pipelining


@dataclass(frozen=True, slots=True)
class LaminaSetup:
    """Two Ray instances of `blocks_per_instance` rBlocks: Lamina's compute and memory instance, or two
    Infinite-LLM instances."""

    blocks_per_instance: int
    block_size: int
    max_batch_size: int
    num_instances: int = 2


def memory_knobs(perf: CalibratedPerfModel, setup: LaminaSetup, micro_batches: int) -> LaminaKnobs:
    """Lamina's knobs for one instance whose memory device is a process of this machine: its KV read rate the
    calibration's decode attention (all layers of a token per `kv_read_s_per_token` x layers), the NIC the gloo
    link's bandwidth at its largest measured message, the pool the memory instance's rBlocks."""
    curve = perf.link.curve
    return LaminaKnobs(memory_devices=1, micro_batches=micro_batches, max_batch=setup.max_batch_size,
                       nic_gb_s_per_gpu=curve.xs[-1] / curve.ys[-1] / 1e9,
                       attention_bytes_per_s=kv_bytes_per_token(perf.model) / perf.num_layers
                       / perf.kv_read_s_per_token,
                       pool_tokens=setup.blocks_per_instance * setup.block_size)


def lamina_sim_config(base: SimConfig, perf: CalibratedPerfModel, setup: LaminaSetup, micro_batches: int):
    """The simulated Lamina of the real one: one instance (compute and its memory device) on `base`'s calibration."""
    one = replace(base, design_knobs=memory_knobs(perf, setup, micro_batches),
                  engine=replace(base.engine, num_instances=1))
    return system_config(LAMINA, one)


def message_latency_per_step_s(perf: CalibratedPerfModel) -> float:
    """What the simulated Lamina waits on the link per unpipelined decode step beyond bandwidth: every layer's
    round trip."""
    return perf.num_layers * round_trip_s(perf.link)


def _ranks(points: list[dict], side: str) -> dict:
    """Designs best first by max output tok/s over the rates and by median TTFT over the rates."""
    best = {s: max((p[f"{side}_output_tok_s"] or 0.0) for p in points if p["system"] == s) for s in SYSTEMS}
    ttft = {s: float(np.median([p[f"{side}_mean_ttft_s"] for p in points
                                if p["system"] == s and p[f"{side}_mean_ttft_s"] is not None] or [np.inf]))
            for s in SYSTEMS}
    return {"output_tok_s": sorted(SYSTEMS, key=lambda s: -best[s]), "mean_ttft_s": sorted(SYSTEMS, key=ttft.get)}


def ranking(points: list[dict]) -> dict:
    """Whether the simulator orders the designs as the real runs do (max output tok/s; median TTFT)."""
    measured, predicted = _ranks(points, "measured"), _ranks(points, "predicted")
    return {"measured": measured, "predicted": predicted,
            "same": {m: measured[m] == predicted[m] for m in measured}}


def run_lamina_arm(spec, make_requests, setup: LaminaSetup, *, multipliers, repeats: int, seed: int, quick: bool,
                   folder: Path, log, rates=None) -> dict:
    """Measured and simulated runs of Lamina and Infinite-LLM at every rate; `make_requests(rate)` gives the
    workload (every request fits the memory instance: no preemption on either side)."""
    model = random_model(spec, seed, torch.float32)
    threads_before = torch.get_num_threads()
    ray_config = RayConfig(num_cpus=setup.num_instances, cpus_per_instance=1.0 / len(SYSTEMS))
    configs = {LAMINA: lamina_engine_config(EngineConfig(setup.num_instances, setup.blocks_per_instance,
                                                         block_size=setup.block_size,
                                                         max_batch_size=setup.max_batch_size, seed=seed)),
               BASELINE: engine_config(design(BASELINE), setup.num_instances, setup.blocks_per_instance,
                                       setup.block_size, max_batch_size=setup.max_batch_size, seed=seed)}
    placement, homes = offload_placement(NUM_COMPUTE), tuple(range(NUM_COMPUTE))
    serving = {LAMINA: {"placement": placement, "homes": homes}, BASELINE: {}}
    pooled_setup = PooledSetup(setup.num_instances, setup.blocks_per_instance, setup.block_size,
                               setup.max_batch_size)
    gm_config = GManagerConfig()

    def measure(system: str, requests) -> tuple[dict, dict]:
        return served_summary(*server.serve(requests, configs[system], seed=seed, **serving[system]))

    loads, calibrations, burst = [load_1m()], [], make_requests(float("inf"))

    def calibrated(repeat: int, rate: float) -> Path:
        torch.set_num_threads(1)  # as each instance's actor runs
        path = calibrate(spec, torch.device("cpu"), torch.float32, seed, burst, setup.max_batch_size,
                         CALIBRATION_CLOCK, quick, folder, 1000 + len(calibrations))
        link_s = add_measured_link(path)
        calibrations.append({"system": "lamina-arm", "repeat": repeat, "rate_per_s": rate,
                             **calibration_record(path, load_1m()), "link_one_way_s": link_s})
        return path

    started = init_ray(ray_config)
    server = None
    try:
        first = calibrated(-1, 0.0)
        perf = CalibratedPerfModel.for_setting(model=spec.name, gpu=CPU_HARDWARE, link=GLOO, coefficients_path=first)
        server = RayServer(model, ray_config, gmanager_config=gm_config, perf_model=perf)
        saturation = measure_saturation(measure, SYSTEMS, burst)
        top = max(s["rate_per_s"] for s in saturation.values())
        rates = rates or tuple(float(f"{top * m:.3g}") for m in multipliers)
        log(f"  lamina arm, 1 compute + 1 memory Ray instance ({setup.blocks_per_instance} rBlocks) against "
            f"Infinite-LLM on 2: saturation " + ", ".join(f"{s} {v['output_tok_s']:.1f} tok/s ({v['rate_per_s']:.3g} "
                                                        f"req/s)" for s, v in saturation.items())
            + f"; rates {', '.join(f'{r:g}' for r in rates)}; load {loads[-1]}")
        runs = []
        for repeat, rate in progress([(k, r) for k in range(repeats) for r in rates], desc="lamina arm", unit="rate"):
            requests = make_requests(rate)
            path = calibrated(repeat, rate)
            perf = CalibratedPerfModel.for_setting(model=spec.name, gpu=CPU_HARDWARE, link=GLOO, coefficients_path=path)
            base = sim_config(configs[BASELINE], gm_config, pooled_setup, spec.name, path)
            sims = {LAMINA: lamina_sim_config(base, perf, setup, REAL_MICRO_BATCHES),
                    BASELINE: system_config(BASELINE, base)}
            for system in SYSTEMS:
                load_before = load_1m()
                measured, stats = measure(system, requests)
                loads.append(load_1m())
                predicted = asdict(run_summary(simulate(sims[system], requests)))
                record = {"system": system, "num_instances": setup.num_instances, "repeat": repeat,
                          "rate_per_s": rate, "measured": measured, "predicted": predicted, "engine": stats,
                          "loadavg_1m_before": load_before, "loadavg_1m_after": loads[-1]}
                if system == LAMINA:
                    pipelined = run_summary(simulate(lamina_sim_config(base, perf, setup, MICRO_BATCHES), requests))
                    record.update(predicted_pipelined=asdict(pipelined),
                                  message_latency_per_step_s=message_latency_per_step_s(perf))
                runs.append(record)
                log(f"  lamina arm {system:<12} rate {rate:g}/s: measured {measured['output_tok_s']:.1f} tok/s, "
                    f"predicted {predicted['output_tok_s']:.1f}; TTFT {1e3 * (measured['mean_ttft_s'] or 0):.0f} vs "
                    f"{1e3 * (predicted['mean_ttft_s'] or 0):.0f} ms; step {stats['step_ms']:.1f} ms; load {loads[-1]}")
    finally:
        if server is not None:
            server.close()
        torch.set_num_threads(threads_before)
        if started:
            ray.shutdown()
    points = make_points(runs)
    lamina_runs = [r for r in runs if r["system"] == LAMINA]
    return {"setup": asdict(setup), "systems": list(SYSTEMS), "saturation": saturation, "rates_per_s": list(rates),
            "calibrations": calibrations, "runs": runs, "points": points, "ranking": ranking(points),
            "pipelining": {  # what the design's micro-batches would take off the simulated Lamina
                "micro_batches": MICRO_BATCHES,
                "pipelined_tok_s_over_predicted": float(np.median(
                    [r["predicted_pipelined"]["output_tok_s"] / r["predicted"]["output_tok_s"] for r in lamina_runs])),
                "pipelined_ttft_over_predicted": float(np.median(
                    [r["predicted_pipelined"]["mean_ttft_s"] / r["predicted"]["mean_ttft_s"] for r in lamina_runs]))},
            "message_latency_per_step_s": float(np.median([r["message_latency_per_step_s"] for r in lamina_runs])),
            "measured_step_ms": float(np.median([r["engine"]["step_ms"] for r in lamina_runs])),
            "loadavg_1m": {"min": min(loads), "max": max(loads), "median": float(np.median(loads))}}
