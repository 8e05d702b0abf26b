"""A run stopped at the end of its steady-state window (simulate(steady_only=True), what probes use) gives the
full run's steady-state rates exactly, and does stop early past saturation."""
import pytest

from reference_impl.sim.config import with_engine
from reference_impl.systems.run import simulate
from reference_impl.systems.registry import cluster, system_config
from workloads.request import Request
from workloads import generate


def _trace(trace_id: int, n: int, rate_per_s: float, seed: int = 0):
    return generate(trace_id=trace_id, num_requests=n, rate_per_s=rate_per_s, seed=seed)


CASES = {
    # past saturation: a queue is left at the last arrival, the window ends at the 90th percentile finish
    "pooled, overloaded": ("infinite-llm", {}, lambda: _trace(0, 120, 200.0)),
    "pooled, chunked prefill": ("infinite-llm", {"chunked_prefill_tokens": 512}, lambda: _trace(0, 120, 200.0)),
    "unpooled, overloaded": ("vllm-m", {}, lambda: _trace(1, 120, 100.0, seed=3)),
    # below saturation: the window ends at the last arrival
    "light load": ("infinite-llm", {}, lambda: _trace(0, 60, 0.5)),
    # a burst (every request at once)
    "burst": ("vllm-m", {}, lambda: [Request(i, 0.0, 1000 + 10 * i, 20, f"r{i}") for i in range(20)]),
    # oversize requests rejected by vLLM-M: more than a tenth of them, so the drain rank is never reached
    "many rejected": ("vllm-m", {}, lambda: [Request(i, 0.1 * i, 150_000 if i % 3 == 0 else 2000, 30, f"r{i}")
                                             for i in range(30)]),
}


@pytest.mark.parametrize("case", CASES)
def test_steady_rates_equal_the_full_runs(case):
    system, overrides, make = CASES[case]
    config = system_config(system, with_engine(cluster("llama2-7b", "A100-80GB-SXM", 4), **overrides))
    requests = make()
    full = simulate(config, requests)
    short = simulate(config, requests, steady_only=True)
    a, b = full.summary(), short.summary()
    assert (b.steady_output_tok_s, b.steady_total_tok_s, b.steady_window_s) == \
        (a.steady_output_tok_s, a.steady_total_tok_s, a.steady_window_s)
    assert a.steady_output_tok_s > 0
    assert short.num_steps <= full.num_steps
    if case in ("pooled, overloaded", "pooled, chunked prefill", "unpooled, overloaded"):
        assert b.num_finished < a.num_finished and short.num_steps < full.num_steps  # it did stop early
    if case == "many rejected":
        assert b.num_finished == a.num_finished  # too few finish for the window to end: the whole run
