"""Sim backend: baselines' admission rules, determinism, invariants, bad input, Algorithm 1's coarse search."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from reference_impl.control.algorithm1 import best_block_count
from reference_impl.errors import InputError
from reference_impl.serving.records import FINISHED, REJECTED
from reference_impl.sim.config import SimConfig, blocks_per_instance, sim_engine, with_engine
from reference_impl.systems.run import simulate
from reference_impl.systems.registry import cluster, instance_tp, system_config
from reference_impl.systems.vllm_m import vllm_m
from reference_impl.systems.vllm_s import vllm_s
from workloads import generate
from workloads.generate import SourceOptions
from workloads.request import Request

GPU = "A100-80GB-SXM"


def capacity_tokens(config) -> int:
    return blocks_per_instance(config) * config.engine.block_size


def test_vllm_m_rejects_exactly_the_requests_that_exceed_one_instance():
    base = cluster("llama2-7b", GPU, 2)
    cap = capacity_tokens(base)
    contexts = [1000, cap - 64, cap, cap + 1, cap + base.engine.block_size, 2 * cap - 64, 500]
    requests = [Request(i, 0.1 * i, c - 16, 16, "t") for i, c in enumerate(contexts)]
    m = simulate(vllm_m(base), requests)
    too_big = {i for i, c in enumerate(contexts) if c > cap}
    assert {r.req_id for r in m.requests if r.status == REJECTED} == too_big
    assert {r.req_id for r in m.requests if r.status == FINISHED} == set(range(len(contexts))) - too_big
    inf = simulate(base, requests)  # pooled: every request fits the cluster
    assert all(r.status == FINISHED for r in inf.requests)
    assert max(r.max_creditors for r in inf.requests) >= 1


@pytest.mark.parametrize("trace", [3, 4, 5, 6, 7, 8])
def test_infinite_llm_serves_every_request_of_long_traces(trace):
    from repro.experiments.e2e import LONG_SETTINGS
    model, gpus = LONG_SETTINGS[trace]
    requests = generate(trace_id=trace, num_requests=4, rate_per_s=0.05, seed=1, options=SourceOptions("fitted"))
    result = simulate(cluster(model, GPU, gpus), requests)
    assert [r.status for r in result.requests] == [FINISHED] * len(requests)
    for r in result.requests:
        assert r.arrival_s <= r.first_token_s <= r.finish_s


def test_same_seed_same_result_bit_for_bit():
    requests = generate(trace_id=0, num_requests=60, rate_per_s=20.0, seed=3, options=SourceOptions(source="fitted"))
    config = SimConfig(engine=sim_engine(num_instances=3))
    a, b = simulate(config, requests), simulate(config, requests)
    assert a.requests == b.requests and a.step_end_s == b.step_end_s and a.summary() == b.summary()


def test_tokens_counted_match_outputs_and_no_block_leaks():
    requests = generate(trace_id=1, num_requests=40, rate_per_s=50.0, seed=2, options=SourceOptions(source="fitted"))
    config = SimConfig(engine=sim_engine(num_instances=2, block_size=16))
    engines, rounds = [], []

    def check_blocks(now_s, engine):
        engines[:] = [engine]
        for inst in engine.instances:
            pool = inst.rm.pool
            assert pool.num_free + pool.num_used == pool.num_capacity  # free + used = total, every round
        # every logical rBlock of a live request has exactly one physical home, counted by its instance
        table_blocks = [b for inst in engine.instances for t in inst.rm.tables.values() for b in t]
        assert len({b.rblock_id for b in table_blocks}) == len(table_blocks)
        held = {}
        for b in table_blocks:
            held[b.inst_id] = held.get(b.inst_id, 0) + 1
        for inst in engine.instances:
            assert sum(inst.rm.hosted.values()) == inst.rm.pool.num_used == held.get(inst.inst_id, 0)
        rounds.append(sum(len(t) for inst in engine.instances for t in inst.rm.tables.values()))

    result = simulate(config, requests, on_round=check_blocks)
    done = result.finished
    assert len(done) == len(requests) and max(rounds) > 0  # rounds saw requests holding blocks
    (engine,) = engines
    for inst in engine.instances:  # after the last request: nothing held, reserved or left in a table
        assert (inst.rm.pool.num_used, inst.rm.tables, inst.rm.hosted) == (0, {}, {})
        assert inst.rm.pool.num_free == inst.rm.pool.num_capacity == blocks_per_instance(config)
    # one token per request and step: the output lengths of the workload (plus one per recomputed prefill)
    recomputed = sum(r.num_preemptions for r in done)
    assert sum(result.step_tokens) - recomputed == sum(r.output_len for r in requests)
    for inst_id in range(config.engine.num_instances):  # each instance produced the tokens of its own requests
        mine = [t for t, i in zip(result.step_tokens, result.step_inst) if i == inst_id]
        assert sum(mine) >= sum(r.output_len for r in done if r.inst_id == inst_id) > 0


def test_vllm_s_is_one_instance_tp_in_node_pp_across():
    s = vllm_s(cluster("llama2-7b", GPU, 32))
    assert (s.engine.num_instances, s.tp, s.pp, s.engine.pooling) == (1, 8, 4, False)
    assert capacity_tokens(s) > capacity_tokens(cluster("llama2-7b", GPU, 32))
    assert instance_tp("llama2-70b", GPU) == 4 and instance_tp("llama2-7b", GPU) == 1


@pytest.mark.parametrize("make, match", [
    (lambda: SimConfig(model="gpt-5"), "unknown model"),
    (lambda: SimConfig(gpu="Z80"), "unknown GPU"),
    (lambda: SimConfig(tp=16), "does not fit a node"),
    (lambda: SimConfig(engine=sim_engine(num_instances=0)), "at least one instance"),
    (lambda: SimConfig(model="llama2-70b", tp=1), "does not fit"),
    (lambda: SimConfig(tp=3), "does not divide"),
])
def test_bad_cluster_settings_are_one_line_errors(make, match):
    with pytest.raises(InputError, match=match):
        blocks_per_instance(make())


def test_unknown_system():
    with pytest.raises(InputError, match="unknown system"):
        system_config("vllm-x", SimConfig())


@settings(max_examples=60, deadline=None)
@given(limit=st.integers(0, 900), peak=st.floats(0, 1), evals=st.integers(2, 64), slope=st.floats(0.1, 5))
def test_coarse_block_search_is_exact_on_unimodal_objectives(limit, peak, evals, slope):
    top = peak * limit
    tps = lambda k: -slope * abs(k - top) + (0.5 if k == round(top) else 0.0)
    assert best_block_count(tps, limit, evals) == best_block_count(tps, limit, None)


def test_gmanager_round_with_32_instances_is_fast():
    import time

    from repro.regression.speed_workloads import loaded_engine
    engine = loaded_engine(32)  # trace 8 and trace 0 requests, one step run
    times, versions = [], set()
    for _ in range(5):
        engine.heartbeats(full=True)  # a new map version each time: the round is computed, not its memo returned
        versions.add(engine.gmanager.version)
        start = time.perf_counter()
        engine.gmanager_round()
        times.append(time.perf_counter() - start)
    assert len(versions) == 5
    assert np.median(times) < 0.05  # target 10 ms on an idle core; loose here for shared CI machines


@pytest.mark.parametrize("system", ["infinite-llm", "vllm-m", "vllm-s"])
def test_chunked_prefill_serves_everything_and_keeps_decodes_going_through_a_long_prompt(system):
    base = cluster("llama2-7b", GPU, 2)
    long_prompt = capacity_tokens(base) // 2
    requests = [Request(i, 0.01 * i, 200, 100, "short") for i in range(1, 9)]
    requests += [Request(0, 0.2, long_prompt, 8, "long")]
    whole = simulate(system_config(system, base), requests)
    chunked = simulate(system_config(system, with_engine(base, chunked_prefill_tokens=2048)), requests)
    for result in (whole, chunked):
        assert [r.status for r in result.requests] == [FINISHED] * len(requests)
        assert sum(result.step_tokens) == sum(r.output_len for r in requests)  # no preemption here
    if system == "vllm-s":  # one instance: a one-step prefill of the long prompt stalls every decode ...

        def tokens_during_long_prefill(res):
            long_ = next(r for r in res.requests if r.req_id == 0)
            return sum(n for t, n in zip(res.step_end_s, res.step_tokens) if long_.arrival_s < t < long_.first_token_s)

        assert tokens_during_long_prefill(whole) <= 8  # (at most the decode step in flight when it arrived)
        # ... chunked, the 8 short requests decode in every step that carries a chunk of it
        assert tokens_during_long_prefill(chunked) >= 8 * (long_prompt // 2048 - 1)


def test_chunked_prefill_needs_a_block_per_step():
    with pytest.raises(InputError, match="chunked prefill"):
        SimConfig(engine=sim_engine(chunked_prefill_tokens=16))


def test_capacity_check_is_the_engines_and_counts_the_lending_cap():
    base = with_engine(cluster("llama2-7b", GPU, 2), max_lent_blocks=10)
    own, bs = capacity_tokens(base), base.engine.block_size
    requests = [Request(0, 0.0, own + 10 * bs - 16, 16, "fits"),
                Request(1, 0.0, own + 10 * bs + 1, 16, "over the cap")]
    result = simulate(base, requests)
    assert [r.status for r in result.requests] == [FINISHED, REJECTED]
