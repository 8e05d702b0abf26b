"""The simulator's served-step cost (EngineCosts.served_step_s, measured on the Ray engine by sim-vs-real's
pooled arm): it slows only steps with remote rBlocks, and a calibration without it simulates as before; likewise the
per-call latency of a control-plane call on a peer (peer_call_s)."""
import json

from reference_impl.calibration import coefficients
from reference_impl.sim.config import SimConfig, sim_engine
from reference_impl.systems.run import simulate
from workloads import Request

GPU, MODEL = "A100-80GB-SXM", "llama2-7b"


def calibration(tmp_path, served_step_s=None, **costs):
    doc = json.loads(coefficients.DEFAULT_PATH.read_text())
    for key, seconds in {"served_step_s": served_step_s, **costs}.items():
        if seconds is not None:
            doc["hardware"][GPU][key] = {MODEL: {"s": seconds, "source": "test"}}
    path = tmp_path / f"calibration-{served_step_s}-{sorted(costs.items())}.json"
    path.write_text(json.dumps(doc))
    return str(path)


def run(path, pooling=True, prompt_len=200):
    config = SimConfig(model=MODEL, gpu=GPU, num_blocks=8, coefficients_path=path,
                       engine=sim_engine(num_instances=2, block_size=16, max_batch_size=8, pooling=pooling))
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


def test_the_creditors_core_pays_the_cpu_cost_and_the_debtor_waits_the_wall_time(tmp_path):
    # 150 tokens borrow 2 rBlocks from the instance serving the 40-token request, which keeps room for it
    runs = [run(calibration(tmp_path, 0.05, **cpu), prompt_len=150) for cpu in ({}, {"served_cpu_s": 0.01},
                                                                              {"served_cpu_s": 0.0})]
    assert runs[0].requests[0].max_creditors == 1 and runs[0].requests[1].max_creditors == 0
    assert len({r.requests[0].finish_s for r in runs}) == 1  # the debtor waits the wall time whatever the CPU cost
    creditor_own = [r.requests[1].finish_s for r in runs]  # the creditor's own request pays its core's share
    assert creditor_own[0] > creditor_own[1] > creditor_own[2]
    assert creditor_own[1] - creditor_own[2] >= 0.01 * 3  # at least a few of the debtor's steps were served


def test_each_waiting_peer_call_costs_its_caller_and_none_without_pooling(tmp_path):
    base, slow = run(calibration(tmp_path)), run(calibration(tmp_path, peer_call_s=0.01))
    # borrowing at admission or per decode block asks the creditor (reservation, then the reserved blocks)
    assert slow.requests[0].finish_s >= base.requests[0].finish_s + 2 * 0.01
    assert slow.num_peer_calls >= 2 and base.num_peer_calls == 0  # counted only where they cost time
    unpooled = [run(calibration(tmp_path, peer_call_s=s), pooling=False, prompt_len=60) for s in (None, 0.01)]
    assert summary(unpooled[0]) == summary(unpooled[1])


def test_counting_the_calls_changes_nothing_but_their_cost(tmp_path):
    base, tiny = run(calibration(tmp_path)), run(calibration(tmp_path, peer_call_s=1e-12))  # wrapped peers, ~no cost
    rounded = lambda r: [(s, round(a, 6), round(b, 6)) for s, a, b in summary(r)]  # noqa: E731
    assert rounded(base) == rounded(tiny) and base.num_moved_blocks == tiny.num_moved_blocks
