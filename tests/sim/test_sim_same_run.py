"""Settings that cannot change a simulated run, which the sensitivity study relies on to simulate a run once:
without pooling the link is never read and no peer is called (as_simulated), and a batch cap above a run's peak batch
(peak_batch_size) gives the same run step for step, while one below it changes the run."""
import dataclasses

import pytest

from reference_impl.calibration.engine_costs import EngineCosts
from reference_impl.sim.config import with_engine
from reference_impl.systems.run import simulate
from reference_impl.systems.registry import as_simulated, cluster, system_config
from workloads import generate

LINKS = ("intra-node", "inter-node", "0.125")


def _run(system: str, requests, max_batch_size: int | None = None, **overrides):
    base = dataclasses.replace(cluster("llama2-7b", "A100-80GB-SXM", 4), **overrides)
    if max_batch_size is not None:
        base = with_engine(base, max_batch_size=max_batch_size)
    return simulate(system_config(system, base), requests)


def _trajectory(run) -> tuple:
    return (run.step_end_s, run.step_tokens, run.step_inst, run.summary(), run.num_moved_blocks)


def test_without_pooling_the_link_is_not_read():
    requests = generate(trace_id=4, num_requests=16, rate_per_s=0.5, seed=0)  # prompts up to ~105K tokens
    pooled = {link: _run("infinite-llm", requests, link=link) for link in LINKS}
    assert pooled["0.125"].summary().output_tok_s < 0.5 * pooled["intra-node"].summary().output_tok_s
    for system in ("vllm-m", "vllm-s"):
        runs = [_trajectory(_run(system, requests, link=link)) for link in LINKS]
        assert runs[0] == runs[1] == runs[2]
        configs = {as_simulated(system_config(system, cluster("llama2-7b", "A100-80GB-SXM", 4, link=link)))
                   for link in LINKS}
        assert len(configs) == 1
    assert len({as_simulated(cluster("llama2-7b", "A100-80GB-SXM", 4, link=link)) for link in LINKS}) == 3


@pytest.mark.parametrize("system", ["llumnix", "pd-disaggregation"])
def test_a_design_that_moves_kv_without_pooling_keeps_its_link(system):
    """Live migration and the prefill/decode hand-over send KV over the link with pooling off: configs on
    different links are different points."""
    configs = {as_simulated(system_config(system, cluster("llama2-7b", "A100-80GB-SXM", 4, link=link)))
               for link in LINKS}
    assert len(configs) == len(LINKS)


def test_a_peer_call_costs_only_where_instances_pool():
    """A control-plane call on a peer (peer_call_s) slows Infinite-LLM, whose instances reserve and borrow on
    their peers, and is never made without pooling."""
    requests = generate(trace_id=4, num_requests=16, rate_per_s=0.5, seed=0)
    slow_calls = EngineCosts(peer_call_s=0.05)
    free, slow = _run("infinite-llm", requests), _run("infinite-llm", requests, engine_costs=slow_calls)
    assert slow.num_peer_calls > 0
    assert slow.summary().mean_latency_s > free.summary().mean_latency_s
    for system in ("vllm-m", "vllm-s"):
        runs = [_run(system, requests, engine_costs=c) for c in (None, slow_calls)]
        assert _trajectory(runs[0]) == _trajectory(runs[1]) and runs[1].num_peer_calls == 0
        configs = {as_simulated(system_config(system, cluster("llama2-7b", "A100-80GB-SXM", 4, engine_costs=c)))
                   for c in (None, EngineCosts(), slow_calls)}
        assert len(configs) == 1


@pytest.mark.parametrize("system,trace_id,rate_per_s", [("infinite-llm", 0, 40.0), ("vllm-m", 0, 40.0),
                                                        ("infinite-llm", 4, 0.5)])
def test_a_cap_above_the_peak_batch_is_the_same_run(system, trace_id, rate_per_s):
    requests = generate(trace_id=trace_id, num_requests=120 if trace_id == 0 else 16, rate_per_s=rate_per_s, seed=1)
    default = _run(system, requests)
    peak = default.peak_batch_size
    assert 2 <= peak < 256
    for cap in (peak + 1, 1024):
        assert _trajectory(_run(system, requests, max_batch_size=cap)) == _trajectory(default)
    capped = _run(system, requests, max_batch_size=peak - 1)
    assert capped.peak_batch_size == peak - 1
    assert _trajectory(capped) != _trajectory(default)
