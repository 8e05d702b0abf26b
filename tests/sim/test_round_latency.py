"""A gManager round whose decisions take effect its latency after its heartbeats (SimConfig.gmanager_latency_s):
the decisions run at heartbeat time + latency, planned on the heartbeats' views and applied to the state of then;
the next round still starts one interval after the last; with moves in flight every rBlock keeps one home and
every request ends as with decisions at once; a latency outside [0, interval) is refused."""
import pytest

from reference_impl.errors import InputError
from reference_impl.sim.config import SimConfig, sim_engine
from reference_impl.systems.run import simulate
from workloads import generate
from workloads.generate import SourceOptions


def _borrowing_run(latency_s: float, on_round=None):
    requests = generate(trace_id=4, num_requests=12, rate_per_s=0.5, seed=1, options=SourceOptions(source="fitted"))
    config = SimConfig(model="llama2-7b", engine=sim_engine(num_instances=4), num_blocks=160,
                       gmanager_latency_s=latency_s)
    return simulate(config, requests, on_round=on_round)


def _one_home_each(engine):
    blocks = [b for inst in engine.instances for t in inst.rm.tables.values() for b in t]
    assert len({b.rblock_id for b in blocks}) == len(blocks)
    for inst in engine.instances:
        assert inst.rm.pool.num_free + inst.rm.pool.num_used == inst.rm.pool.num_capacity


def test_decisions_run_their_latency_after_the_heartbeats_and_rounds_keep_their_interval():
    latency_s, times = 0.25, []
    result = _borrowing_run(latency_s, on_round=lambda now_s, engine: times.append(now_s))
    assert times and result.num_gmanager_rounds >= len(times)
    for t in times:
        assert (t - latency_s) % 1.0 == pytest.approx(0.0, abs=1e-9) or (t - latency_s) % 1.0 == pytest.approx(1.0)


def test_late_decisions_move_kv_without_losing_a_home_and_serve_everything():
    def check(now_s, engine):
        _one_home_each(engine)

    at_once, late = _borrowing_run(0.0), _borrowing_run(0.5, on_round=check)
    assert at_once.num_moved_blocks > 0 and late.num_moved_blocks > 0  # rounds that decide something
    # each request ends as it does with decisions at once (served, or rejected as larger than the cluster)
    assert [r.status for r in late.requests] == [r.status for r in at_once.requests]
    assert any(r.status == "finished" for r in late.requests)
    assert (late.step_end_s, late.num_moved_blocks) != (at_once.step_end_s, at_once.num_moved_blocks)


@pytest.mark.parametrize("latency_s", [-0.1, 1.0, 2.0])
def test_a_latency_outside_the_interval_is_refused(latency_s):
    with pytest.raises(InputError, match="latency"):
        SimConfig(gmanager_latency_s=latency_s)
