"""LoongServe as a serving design: the run's invariants (every KV block one home at every event, a prefill group
within its members' room and holding the batch's KV, bit-for-bit repeatable, property test over request sets), the
ring prefill's cost against the one-instance prefill and hand arithmetic, the analytic model's fit and choices, and
the mechanism's direction (a long prompt's prefill ends sooner on a group; a member's own step waits for it)."""
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from reference_impl.calibration.perf_model import InstanceLoad, causal_prefill_pairs, step_time_s
from reference_impl.serving.records import FINISHED, REJECTED
from reference_impl.sim.config import SimConfig, perf_model, sim_engine
from reference_impl.systems.run import simulator, simulate
from reference_impl.systems.loongserve import LoongServeKnobs
from reference_impl.systems.loongserve.analytic import Candidate, choose_group, fit_prefill_model
from reference_impl.systems.loongserve.backend import LoongServeBackend
from reference_impl.systems.loongserve.sp_cost import kv_bytes_per_token_per_layer, ring_prefill
from reference_impl.systems.registry import system_config
from workloads.request import Request

sys.path.insert(0, str(Path(__file__).parents[1] / "control"))
from rm_cluster import check_invariants  # noqa: E402  (the control plane's own invariants)

BLOCKS, BLOCK = 48, 16  # a small pool: 768 tokens an instance, so prompts spill over groups and decodes scale up


def small(num_instances=3, **knobs) -> SimConfig:
    base = SimConfig(num_blocks=BLOCKS, engine=sim_engine(num_instances=num_instances, block_size=BLOCK),
                     design_knobs=LoongServeKnobs(**knobs) if knobs else None)
    return system_config("loongserve", base)


def mixed(n=24, seed=3):
    """Prompts from a few tokens to nearly two instances, outputs long enough to outgrow a master."""
    import random
    rng = random.Random(seed)
    return [Request(i, 0.05 * i, rng.choice([20, 300, 700, 1200]), rng.choice([5, 60, 200]), "test")
            for i in range(n)]


def checked_run(config, requests):
    """The run, with the control plane's invariants checked after every event (exclusive roles off: one pool)."""
    holder = {}

    def check(now_s):
        rms = [holder["sim"].engine.rmanagers[i] for i in sorted(holder["sim"].engine.rmanagers)]
        check_invariants(rms, exclusive_roles=False)

    sim = holder["sim"] = simulator(config, requests, on_event=check)
    return sim, sim.run()


def test_every_block_one_home_and_groups_within_room(monkeypatch):
    groups = []
    original = LoongServeBackend._group

    def recorded(self, master, holders, lengths, batch, now):
        group = original(self, master, holders, lengths, batch, now)
        rms = self.cluster.engine.rmanagers
        need = sum(-(-n // BLOCK) for n in lengths)
        groups.append((master, set(holders), list(group), need, sum(rms[j].pool.num_capacity for j in group)))
        return group
    monkeypatch.setattr(LoongServeBackend, "_group", recorded)
    sim, result = checked_run(small(), mixed())
    assert result.count(FINISHED) == len(result.requests)
    assert any(len(g) > 1 for _, _, g, _, _ in groups), "no prompt ran on a group: the case tests nothing"
    for master, holders, group, need, room in groups:
        assert group[0] == master and holders <= set(group)  # the KV stays with the members that computed it
        assert len(set(group)) == len(group)
        assert need <= room  # a group never holds more than its members' room
    assert result.num_moved_blocks == 0  # KV is placed at prefill and never moved
    counters = result.design_counters
    assert counters["scale_ups"] > 0 and counters["remote_exchange_bytes"] > 0


def test_same_seed_same_result_bit_for_bit():
    def run():
        r = simulate(small(), mixed(seed=5))
        return ([(q.req_id, q.status, q.inst_id, q.first_token_s, q.finish_s, q.num_preemptions) for q in r.requests],
                r.step_end_s, r.step_tokens, r.step_inst, r.design_counters)
    assert run() == run()


requests = st.lists(st.tuples(st.floats(0.0, 2.0, allow_nan=False), st.integers(1, 1600), st.integers(1, 120)),
                    min_size=1, max_size=12)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests, st.integers(2, 4))
def test_random_request_sets_keep_invariants_and_tokens(reqs, num_instances):
    reqs = [Request(i, a, p, o, "test") for i, (a, p, o) in enumerate(reqs)]
    sim, result = checked_run(small(num_instances), reqs)
    by_id = {r.req_id: r for r in reqs}
    assert result.count(FINISHED) + result.count(REJECTED) == len(reqs)  # nothing stuck
    finished = [q for q in result.requests if q.status == FINISHED]
    assert sum(result.step_tokens) == sum(by_id[q.req_id].output_len for q in finished)  # no token lost or doubled
    assert all(rm.pool.num_used == 0 for rm in sim.engine.rmanagers.values())  # every block freed at the end
    for q in result.requests:  # only what no pool of the cluster can hold is rejected
        fits = -(-(by_id[q.req_id].prompt_len + by_id[q.req_id].output_len) // BLOCK) <= num_instances * BLOCKS
        assert (q.status == REJECTED) == (not fits)


A100 = dict(model="llama2-7b", gpu="A100-80GB-SXM")


def test_ring_of_one_is_the_one_instance_prefill():
    model = perf_model(SimConfig(**A100))
    for n in (100, 4000, 60000):
        load = InstanceLoad(batch_size=0, attn_kv_tokens=0, prefill_tokens=n,
                            prefill_attn_pairs=causal_prefill_pairs(n))
        assert ring_prefill(model, 1, n, causal_prefill_pairs(n)).duration_s == pytest.approx(step_time_s(model, load))


def test_ring_hops_by_hand():
    model = perf_model(SimConfig(**A100))
    n, k = 40000, 4
    ring = ring_prefill(model, k, n, causal_prefill_pairs(n))
    hop = n / k * 2 * 32 * 128 * 2  # a stripe's K and V, llama2-7b's 32 heads of 128, fp16
    assert kv_bytes_per_token_per_layer(model) == 2 * 32 * 128 * 2
    assert ring.hop_bytes == pytest.approx(32 * k * (k - 1) * hop)
    rounds = causal_prefill_pairs(n) / k ** 2 * model.prefill_attn_s_per_pair
    non_attention = model.non_attention(n / k)
    expected = 32 * (non_attention + rounds + (k - 1) * max(rounds, model.link.time_s(hop)))
    assert ring.duration_s == pytest.approx(expected)


def test_fitted_model_tracks_the_ring_and_its_choices_grow_with_length():
    model = perf_model(SimConfig(**A100))
    fitted = fit_prefill_model(model, 8, 8 * 100_000)
    assert fitted.fit_err_mean < 0.10  # the quadratic form describes the ring's cost (LoongServe: within 10%)
    idle = [Candidate(j, 0.0, 0.0) for j in range(1, 8)]
    degrees = [len(choose_group(fitted, [n], [Candidate(0, 0.0, 0.0)], list(idle)))
               for n in (64, 256, 1024, 4096, 16384, 65536, 262144)]
    assert degrees == sorted(degrees) and degrees[0] == 1 and degrees[-1] > 2


def test_busy_candidates_and_decode_batches_are_drawn_last():
    fitted = fit_prefill_model(perf_model(SimConfig(**A100)), 4, 400_000)
    others = [Candidate(1, 5.0, 0.0), Candidate(2, 0.0, 0.0), Candidate(3, 0.0, 0.5)]
    assert choose_group(fitted, [200_000], [Candidate(0, 0.0, 0.0)], others)[:2] == [0, 2]
    assert choose_group(fitted, [200_000], [Candidate(0, 0.0, 0.0)], [Candidate(1, 0.0, 1.0)]) == [0]


def long_prompt_run(max_degree=None, extra=()):
    base = SimConfig(**A100, engine=sim_engine(num_instances=4))
    config = system_config("loongserve", replace(base, design_knobs=LoongServeKnobs(max_degree=max_degree)))
    return simulate(config, [Request(0, 0.0, 60_000, 4, "test"), *extra])


def test_long_prompt_prefill_ends_sooner_on_a_group():
    grouped, alone = long_prompt_run(), long_prompt_run(max_degree=1)
    assert grouped.design_counters["prefill_degree_max"] > 1 and alone.design_counters["prefill_degree_max"] == 1
    assert grouped.requests[0].first_token_s < alone.requests[0].first_token_s
    assert grouped.design_counters["ring_kv_hop_bytes"] > 0 == alone.design_counters["ring_kv_hop_bytes"]


def test_a_members_own_step_waits_for_the_prefill():
    """Every instance is in the long prompt's group: a short request arriving meanwhile gets its first token only
    after that prefill ends; with no sequence parallelism a free instance serves it at once."""
    short = Request(1, 0.01, 50, 2, "test")
    grouped, alone = long_prompt_run(extra=[short]), long_prompt_run(max_degree=1, extra=[short])
    assert grouped.design_counters["prefill_degree_max"] == 4
    assert grouped.requests[1].first_token_s >= grouped.requests[0].first_token_s
    assert alone.requests[1].first_token_s < alone.requests[0].first_token_s
    assert grouped.design_counters["member_wait_s"] > 0


def test_multi_master_exchange_is_priced():
    """LoongServe's decode sends each holder the query and gets (out, lse) back every layer: the cost model the
    base backend uses prices both on the link, per remote query (so the design adds nothing to the step)."""
    model = perf_model(SimConfig(**A100))
    assert model.query_bytes == 4096 * 2 and model.result_bytes == 4096 * 2 + 32 * 4  # fp16 out, an fp32 lse a head
    local = InstanceLoad(batch_size=8, attn_kv_tokens=8000)
    remote = replace(local, num_remote_queries=3)
    exchange = model.link.time_s(3 * model.query_bytes) + model.link.time_s(3 * model.result_bytes)
    assert model.layer_time_s(remote) - model.layer_time_s(local) == pytest.approx(exchange)
