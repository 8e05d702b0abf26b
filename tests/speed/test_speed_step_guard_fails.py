"""The step guard (sim-step-128, held to a 1.5x slowdown) can fail: with every simulated step made 2x slower (it
spins for as long again), the ratio falls below its baseline's tolerance and the message says by how much."""
import time

import pytest

from reference_impl.sim.backend import SimBackend
from repro.regression.speed import check_ratio, load_baseline, measure
from repro.regression.speed_workloads import BY_NAME

pytestmark = pytest.mark.regression


def test_a_step_made_2x_slower_fails_the_step_guard(monkeypatch):
    step = SimBackend.step

    def slow_step(self, instance, co_running=0.0):
        start = time.process_time()
        outcome = step(self, instance, co_running)
        spent = time.process_time() - start
        while time.process_time() - start < 2 * spent:
            pass
        return outcome

    monkeypatch.setattr(SimBackend, "step", slow_step)
    case = BY_NAME["sim-step-128"]
    assert case.tolerance == 1.5
    result = measure(case, "ci")
    failure = check_ratio(result, load_baseline())
    assert failure is not None, f"2x slower steps passed: ratio {result.ratio:.3g}"
    assert "slower than at the baseline" in failure and "baseline / 1.5" in failure
