"""Part 5: sim-vs-real on the device. One instance serves a short trace at rates from light load to past its
measured saturation (the wall clock); the simulator then serves the same requests twice: with the committed
calibration the figures use, and with a calibration profiled on this device just before (`repro profile` with
a plan covering the workload, the engine's step overhead included). Errors are predicted against measured."""
import os
import statistics
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

import torch

from reference_impl.backends.local import serve
from reference_impl.calibration.specs import model_spec
from reference_impl.control.engine import EngineConfig
from reference_impl.control.sequence import num_blocks_for
from reference_impl.model.llama import random_model
from reference_impl.sim.config import SimConfig, sim_engine
from reference_impl.systems.run import simulate
from repro.experiments.sim_vs_real.calibration import calibrate
from repro.experiments.sim_vs_real.points import run_summary
from repro.serving.tasks import workload
from repro.validate_gpu.sizes import COMMITTED_GPU, COMMITTED_MODEL, DEADLINE_ENV
from workloads.scaling import scale_to_longest

SEED = 0
BLOCK_SIZE = 16
METRICS = ("output_tok_s", "mean_ttft_s", "mean_tpot_s")


def _error(predicted, measured):
    return None if predicted is None or not measured else predicted / measured - 1


def deadline() -> float:
    """time.time() by which the part must be done (the runner's budget), or never."""
    return float(os.environ.get(DEADLINE_ENV, "inf"))


def rates_in_time(sat_rate: float, makespan_s: float, multipliers, until: float, margin_s: float = 15.0):
    """The rates (multiples of the saturation rate) whose runs fit before `until`, heaviest first to be dropped
    last; a run at m x saturation lasts about max(1, 1/m) saturated makespans. Returns (rates, dropped)."""
    left_s = until - time.time() - margin_s
    keep, dropped = [], []
    for m in sorted(multipliers, reverse=True):
        run_s = 1.2 * makespan_s * max(1.0, 1.0 / m)
        (keep if run_s <= left_s else dropped).append(m)
        left_s -= run_s if run_s <= left_s else 0.0
    as_rate = lambda ms: [float(f"{sat_rate * m:.3g}") for m in sorted(ms)]  # noqa: E731
    return as_rate(keep), as_rate(dropped)


def run(size, device: torch.device) -> dict:
    spec = model_spec(size.model)
    dtype = getattr(torch, size.dtype)
    model = random_model(spec, SEED, dtype, device)
    num_blocks = size.max_batch_size * num_blocks_for(size.max_tokens, BLOCK_SIZE) + 1  # no preemption
    engine_config = EngineConfig(1, num_blocks, block_size=BLOCK_SIZE, max_batch_size=size.max_batch_size, seed=SEED)

    def requests_at(rate):
        return scale_to_longest(workload(trace_id=size.trace, num_requests=size.num_requests, rate_per_s=rate,
                                         seed=SEED, source="fitted"), size.max_tokens)

    def measure(requests):
        return run_summary(serve(model, requests, engine_config, seed=SEED, device=device, clock="wall"))

    burst = requests_at(float("inf"))
    measure(burst[: min(4, len(burst))])  # warm-up: kernels compiled, allocator primed
    saturation = measure(burst)
    sat_rate = saturation.num_finished / saturation.makespan_s
    arms = {"committed": dict(model=COMMITTED_MODEL, gpu=COMMITTED_GPU)}
    with tempfile.TemporaryDirectory() as tmp:
        path = calibrate(spec, device, dtype, SEED, burst, size.max_batch_size, "wall", size.quick_profile, Path(tmp), 0)
        calibration = path.read_text()
        arms["on_the_spot"] = dict(model=spec.name, gpu=str(device), coefficients_path=str(path))
        rates, dropped = rates_in_time(sat_rate, saturation.makespan_s, size.multipliers, deadline())
        points = []
        for rate in rates:
            requests = requests_at(rate)
            point = {"rate_per_s": rate, "measured": asdict(measure(requests))}
            for arm, where in arms.items():
                config = SimConfig(**where, link="intra-node", num_blocks=num_blocks,
                                   engine=sim_engine(num_instances=1, block_size=BLOCK_SIZE,
                                                     max_batch_size=size.max_batch_size, seed=SEED))
                point[arm] = asdict(run_summary(simulate(config, requests)))
                point[f"{arm}_error"] = {m: _error(point[arm][m], point["measured"][m]) for m in METRICS}
            points.append(point)
    medians = {arm: {m: statistics.median(abs(p[f"{arm}_error"][m]) for p in points
                                          if p[f"{arm}_error"][m] is not None) for m in METRICS} for arm in arms}
    return {"passed": True, "model": spec.name, "dtype": size.dtype, "trace": size.trace,
            "num_requests": size.num_requests, "max_tokens": size.max_tokens, "max_batch_size": size.max_batch_size,
            "saturation": {"output_tok_s": saturation.output_tok_s, "rate_per_s": sat_rate}, "rates_per_s": rates,
            "rates_dropped_for_time": dropped,
            "committed": f"{COMMITTED_MODEL} on {COMMITTED_GPU}", "shape_matches_committed": spec.name == COMMITTED_MODEL,
            "on_the_spot_calibration": calibration, "points": points, "median_abs_error": medians,
            "headline": {arm: {f"{m}_median_abs_error": v for m, v in med.items()} for arm, med in medians.items()}}
