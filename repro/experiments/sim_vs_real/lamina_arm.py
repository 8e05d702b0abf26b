"""sim-vs-real's Lamina arm: Lamina's attention offloading served for real on Ray (systems/lamina/local.py: one
compute instance holding the weights and no KV, one memory instance holding every rBlock and computing its
attention, DistAttention's remote path) and Infinite-LLM on the same two Ray instances, the same requests; both
simulated with the cost model calibrated on this machine just before each rate (ray_calibration.py, as every Ray
arm's: `repro profile` of one core in CPU time, the Ray engine's own steps, the gloo link between two processes and
the engine costs measured in the saturation runs).

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

from reference_impl.backends.ray.serving import engine_config
from reference_impl.calibration.model import CalibratedPerfModel
from reference_impl.control.engine import EngineConfig
from reference_impl.sim.config import SimConfig
from reference_impl.systems.catalog import design
from reference_impl.systems.lamina.cluster import MICRO_BATCHES, LaminaKnobs
from reference_impl.systems.lamina.hardware import kv_bytes_per_token
from reference_impl.systems.lamina.local import lamina_engine_config, offload_placement
from reference_impl.systems.lamina.step_cost import round_trip_s
from reference_impl.systems.registry import system_config
from reference_impl.systems.run import simulate
from repro.experiments.sim_vs_real.points import run_summary
from repro.experiments.sim_vs_real.ray_runs import run_designs

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


def run_lamina_arm(spec, make_requests, setup: LaminaSetup, *, multipliers, repeats: int, seed: int, quick: bool,
                   folder: Path, log, rates=None) -> dict:
    """Measured and simulated runs of Lamina and Infinite-LLM at every rate; `make_requests(rate)` gives the
    workload (every request fits the memory instance: no preemption on either side)."""
    configs = {LAMINA: lamina_engine_config(EngineConfig(setup.num_instances, setup.blocks_per_instance,
                                                         block_size=setup.block_size,
                                                         max_batch_size=setup.max_batch_size, seed=seed)),
               BASELINE: engine_config(design(BASELINE), setup.num_instances, setup.blocks_per_instance,
                                       setup.block_size, max_batch_size=setup.max_batch_size, seed=seed)}
    engine_runs = {LAMINA: (configs[LAMINA], {"placement": offload_placement(NUM_COMPUTE),
                                              "homes": tuple(range(NUM_COMPUTE))}),
                   BASELINE: (configs[BASELINE], {})}

    def simulated(base, perf, requests):
        return {LAMINA: lamina_sim_config(base, perf, setup, REAL_MICRO_BATCHES),
                BASELINE: system_config(BASELINE, base)}

    def extra(system, base, perf, requests):
        if system != LAMINA:
            return {}
        pipelined = run_summary(simulate(lamina_sim_config(base, perf, setup, MICRO_BATCHES), requests))
        return {"predicted_pipelined": asdict(pipelined),
                "message_latency_per_step_s": message_latency_per_step_s(perf)}

    arm = run_designs(spec, make_requests, setup, engine_runs, simulated, label="lamina arm", multipliers=multipliers,
                      repeats=repeats, seed=seed, quick=quick, folder=folder, log=log, rates=rates, extra=extra)
    lamina_runs = [r for r in arm["runs"] if r["system"] == LAMINA]
    return {**arm,
            "pipelining": {  # what the design's micro-batches would take off the simulated Lamina
                "micro_batches": MICRO_BATCHES,
                "pipelined_tok_s_over_predicted": float(np.median(
                    [r["predicted_pipelined"]["output_tok_s"] / r["predicted"]["output_tok_s"] for r in lamina_runs])),
                "pipelined_ttft_over_predicted": float(np.median(
                    [r["predicted_pipelined"]["mean_ttft_s"] / r["predicted"]["mean_ttft_s"] for r in lamina_runs]))},
            "message_latency_per_step_s": float(np.median([r["message_latency_per_step_s"] for r in lamina_runs])),
            "measured_step_ms": float(np.median([r["engine"]["step_ms"] for r in lamina_runs]))}
