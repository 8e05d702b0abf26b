"""The scale guard can fail: with Simulator.wake_all scanning every instance for one with work and no step queued,
as it did before issue 42, the cost of a step grows with the cluster past MAX_GROWTH."""
import pytest
from scale_growth import BIG_GPUS, MAX_GROWTH, SMALL_GPUS, measure_growth

from reference_impl.sim.events import Handoff
from reference_impl.sim.simulator import Simulator

pytestmark = pytest.mark.regression


def scanning_wake_all(sim, time_s: float):
    steps, parked, busy, pending = [], [], sim.busy, sim.backend.pending
    for inst in sim.engine.instances:
        i, s = inst.inst_id, inst.scheduler
        if busy[i] or not (s.running or s.waiting):
            continue
        if not s.running and s.waits_for_others and not pending[i].sent_tokens:
            parked.append(i)
        else:
            steps += sim.wake(i, time_s)
    return steps + [Handoff(time_s, tuple(parked))] if parked else steps


def test_a_scan_over_the_instances_put_back_fails_the_scale_guard(monkeypatch):
    monkeypatch.setattr(Simulator, "wake_all", scanning_wake_all)
    ratio = measure_growth()
    assert ratio.growth > MAX_GROWTH, (
        f"a per-event scan over {BIG_GPUS} instances passed: {ratio.growth:.2f}x the cost of a step on {SMALL_GPUS}")
