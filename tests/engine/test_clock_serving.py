"""backends/clock.py: serving on a clock, with a scripted engine on a fake clock and with the real local engine."""
import numpy as np
import pytest

from reference_impl.backends.clock import CpuClock, make_clock, serve_on_clock
from reference_impl.errors import InputError
from reference_impl.serving.records import FINISHED, REJECTED
from workloads import Request


class FakeClock:
    def __init__(self):
        self.now_s = 0.0

    def __call__(self):
        return self.now_s

    def sleep(self, seconds):
        self.now_s += seconds


class OneAtATimeEngine:
    """Runs the oldest request alone, one token per step of `step_s` on the fake clock; refuses long prompts."""

    def __init__(self, clock: FakeClock, step_s: float, max_prompt: int):
        self.clock, self.step_s, self.max_prompt = clock, step_s, max_prompt
        self.queue, self.num_steps = [], 0

    def add_request(self, seq):
        if len(seq.prompt_ids) > self.max_prompt:
            raise InputError("too long")
        self.queue.append(seq)
        return 0

    @property
    def has_work(self):
        return bool(self.queue)

    def step(self):
        self.clock.now_s += self.step_s
        self.num_steps += 1
        seq = self.queue[0]
        seq.output_ids.append(1)
        if len(seq.output_ids) == seq.max_new_tokens:
            return [self.queue.pop(0)]
        return []


def test_a_serial_engine_on_a_fake_clock_gives_the_queueing_times_computed_by_hand():
    step_s = 0.5
    requests = [Request(0, 0.0, 4, 3, "t"), Request(1, 0.2, 4, 2, "t"), Request(2, 10.0, 4, 1, "t"),
                Request(3, 1.0, 99, 1, "t")]
    clock = FakeClock()
    engine = OneAtATimeEngine(clock, step_s, max_prompt=8)
    result = serve_on_clock(engine, requests, [[0] * r.prompt_len for r in requests], time_limit_s=100,
                            clock=clock, sleep=clock.sleep)
    r0, r1, r2, r3 = result.requests
    # request 0 runs alone from t=0 for 3 steps; request 1 waits for it, then 2 steps; request 2 after an idle gap
    assert (r0.first_token_s, r0.finish_s) == (step_s, 3 * step_s)
    assert (r1.first_token_s, r1.finish_s) == (4 * step_s, 5 * step_s)
    assert (r2.first_token_s, r2.finish_s) == (10.0 + step_s, 10.0 + step_s)
    assert r3.status == REJECTED and r3.finish_s is None
    assert [r.status for r in (r0, r1, r2)] == [FINISHED] * 3
    assert sum(result.step_tokens) == 3 + 2 + 1 and len(result.step_end_s) == result.num_steps == 6
    assert all(b >= a for a, b in zip(result.step_end_s, result.step_end_s[1:]))


def test_the_time_limit_leaves_the_rest_unfinished():
    clock = FakeClock()
    requests = [Request(0, 0.0, 4, 50, "t")]
    result = serve_on_clock(OneAtATimeEngine(clock, 1.0, 8), requests, [[0] * 4], time_limit_s=5.0, clock=clock,
                            sleep=clock.sleep)
    assert result.requests[0].status == "unfinished" and 5.0 < result.end_s < 50.0


def test_cpu_clock_skips_idle_time_and_counts_only_this_process_work():
    clock = CpuClock()
    start = clock()
    clock.sleep(3.0)
    assert clock() - start >= 3.0
    x = 0.0
    for i in range(200_000):
        x += i
    assert clock() - start > 3.0
    with pytest.raises(InputError):
        make_clock("sundial")


@pytest.mark.parametrize("clock", ["wall", "cpu"])
def test_the_local_engine_serves_every_request_on_either_clock(clock):
    from reference_impl.backends.local import serve
    from reference_impl.control.engine import EngineConfig
    from reference_impl.model.llama import random_model

    rng = np.random.default_rng(0)
    requests = [Request(i, float(a), int(p), int(o), "t") for i, (a, p, o) in
                enumerate(zip(np.cumsum(rng.exponential(0.01, 5)), rng.integers(3, 17, 5), rng.integers(1, 7, 5)))]
    result = serve(random_model(), requests, EngineConfig(1, 32, block_size=4), clock=clock)
    assert [r.status for r in result.requests] == [FINISHED] * 5
    assert sum(result.step_tokens) == sum(r.output_len for r in requests)
    for r in result.requests:
        assert r.arrival_s <= r.first_token_s <= r.finish_s


class EveryOtherStepEngine(OneAtATimeEngine):
    """As OneAtATimeEngine, but only every other step brings a token (a Ray collection often finds none)."""

    idle = False

    def step(self):
        self.idle = not self.idle
        if self.idle:
            self.clock.now_s += self.step_s
            self.num_steps += 1
            return []
        return super().step()


def test_steps_without_tokens_leave_no_point_on_the_timeline():
    clock = FakeClock()
    requests = [Request(0, 0.0, 4, 3, "t")]
    result = serve_on_clock(EveryOtherStepEngine(clock, 0.5, 8), requests, [[0] * 4], time_limit_s=100,
                            clock=clock, sleep=clock.sleep)
    (r0,) = result.requests
    assert (r0.first_token_s, r0.finish_s) == (1.0, 3.0)  # a token each 2 steps of 0.5 s
    assert result.step_tokens == [1, 1, 1] and result.step_end_s == [1.0, 2.0, 3.0] and result.num_steps == 6
