"""Instances sharing the machine's cores in the simulator (EngineCosts.co_run_slowdown, measured by
sim-vs-real's pooled arm, repro/experiments/sim_vs_real/co_run.py): a step computes that much slower while every other
instance computes, not at all while they idle, and a calibration without it simulates as before."""
import json

import pytest

from reference_impl.calibration import coefficients
from reference_impl.sim.config import SimConfig, sim_engine
from reference_impl.systems.run import simulate
from workloads import Request

GPU, MODEL = "A100-80GB-SXM", "llama2-7b"


def calibration(tmp_path, slowdown=None):
    doc = json.loads(coefficients.DEFAULT_PATH.read_text())
    if slowdown is not None:
        doc["hardware"][GPU]["co_run_slowdown"] = {MODEL: {"value": slowdown, "source": "test"}}
    path = tmp_path / f"calibration-{slowdown}.json"
    path.write_text(json.dumps(doc))
    return str(path)


def latencies(path, requests, num_instances=2):
    config = SimConfig(model=MODEL, gpu=GPU, num_blocks=64, coefficients_path=path,
                       engine=sim_engine(num_instances=num_instances, block_size=16, max_batch_size=8, pooling=False))
    return [r.finish_s - r.arrival_s for r in simulate(config, requests).requests]


def requests(arrivals_s):
    return [Request(i, t, 100, 50, "test") for i, t in enumerate(arrivals_s)]


def test_a_slowdown_of_one_or_none_changes_nothing(tmp_path):
    work = requests([0.0, 0.0, 0.3])
    assert latencies(calibration(tmp_path), work) == latencies(calibration(tmp_path, 1.0), work)


def test_steps_beside_a_computing_instance_take_the_slowdown_and_steps_alone_do_not(tmp_path):
    base, slow = calibration(tmp_path), calibration(tmp_path, 1.5)
    alone = requests([0.0])  # one request: one instance computes, the other idles
    assert latencies(slow, alone) == latencies(base, alone)
    together = requests([0.0, 0.0])  # one on each instance, stepping side by side throughout
    ratios = [s / b for s, b in zip(latencies(slow, together), latencies(base, together))]
    assert all(1.4 < r <= 1.5 + 1e-9 for r in ratios), ratios
    assert latencies(slow, alone, num_instances=1) == pytest.approx(latencies(base, alone, num_instances=1))
