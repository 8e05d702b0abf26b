"""Guard 2 can fail: with every engine step made 2x slower (it spins for as long again), the engine-decode
ratio falls below its baseline's tolerance and the message says by how much and how to re-bless."""
import time

import pytest

from reference_impl.control.engine import Engine
from repro.regression.speed import BLESS_COMMAND, check_ratio, load_baseline, measure
from repro.regression.speed_workloads import BY_NAME

pytestmark = pytest.mark.regression


def test_an_engine_step_made_2x_slower_fails_the_guard(monkeypatch):
    pytest.importorskip("transformers")
    step = Engine.step

    def slow_step(self):
        start = time.process_time()
        finished = step(self)
        spent = time.process_time() - start
        while time.process_time() - start < 2 * spent:
            pass
        return finished

    monkeypatch.setattr(Engine, "step", slow_step)
    result = measure(BY_NAME["engine-decode"], "ci")
    failure = check_ratio(result, load_baseline())
    assert failure is not None, f"a 2x slower engine step passed: ratio {result.ratio:.3g}"
    assert "slower than at the baseline" in failure and f"re-bless with `{BLESS_COMMAND}`" in failure
