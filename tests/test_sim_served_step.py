"""The simulator's served-step cost (CalibratedPerfModel.served_step_s, measured on the Ray engine by sim-vs-real's
pooled arm): it slows only steps with remote rBlocks, and a calibration without it simulates as before."""
import json

from reference_impl.calibration import coefficients
from reference_impl.sim.config import SimConfig
from reference_impl.sim.simulator import simulate
from workloads import Request

GPU, MODEL = "A100-80GB-SXM", "llama2-7b"


def calibration(tmp_path, served_step_s=None):
    doc = json.loads(coefficients.DEFAULT_PATH.read_text())
    if served_step_s is not None:
        doc["hardware"][GPU]["served_step_s"] = {MODEL: {"s": served_step_s, "source": "test"}}
    path = tmp_path / f"calibration-{served_step_s}.json"
    path.write_text(json.dumps(doc))
    return str(path)


def run(path, pooling=True, prompt_len=200):
    config = SimConfig(model=MODEL, gpu=GPU, num_instances=2, block_size=16, num_blocks=8, max_batch_size=8,
                       pooling=pooling, coefficients_path=path)
    requests = [Request(0, 0.0, prompt_len, 20, "test"), Request(1, 0.0, 40, 20, "test")]
    return simulate(config, requests)


def summary(result):
    return [(r.status, r.first_token_s, r.finish_s) for r in result.requests]


def test_a_zero_or_absent_cost_changes_nothing(tmp_path):
    assert summary(run(calibration(tmp_path))) == summary(run(calibration(tmp_path, 0.0)))


def test_the_cost_slows_a_request_that_spreads_and_not_one_that_does_not(tmp_path):
    base, slow = run(calibration(tmp_path)), run(calibration(tmp_path, 0.05))
    assert [r.status for r in slow.requests] == [r.status for r in base.requests] == ["finished", "finished"]
    assert base.requests[0].max_creditors >= 1  # 200 tokens outgrow an instance of 128: its rBlocks spread
    # 20 decode steps of the spread request each wait at least the served step
    assert slow.requests[0].finish_s - base.requests[0].finish_s >= 0.95 * 19 * 0.05
    local = [run(calibration(tmp_path, s), prompt_len=60) for s in (None, 0.05)]  # fits its instance
    assert summary(local[0]) == summary(local[1])
