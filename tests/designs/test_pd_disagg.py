"""Prefill/decode disaggregation served on the simulator: every rBlock one home at every event, pools within their
own memory, prefill instances never decode and decode instances never prefill, no token lost in a transfer,
repeatable bit for bit; its counters against hand arithmetic; its TPOT against co-located vLLM-M."""
from collections import Counter
from dataclasses import asdict, replace

from hypothesis import HealthCheck, given, settings, strategies as st

from reference_impl.calibration.specs import model_spec
from reference_impl.control.sequence import num_blocks_for
from reference_impl.serving.records import FINISHED, REJECTED
from reference_impl.systems.run import simulator, simulate
from reference_impl.systems.pd_disagg.knobs import PDKnobs, shape_of
from reference_impl.systems.registry import cluster, system_config
from workloads.generate import generate
from workloads.request import Request

GPU = "A100-80GB-SXM"


def pd_config(gpus=4, num_blocks=None, requests=None, link=None, **knobs):
    base = cluster("llama2-7b", GPU, gpus, num_blocks=num_blocks, **({"link": link} if link else {}))
    if requests is not None:
        knobs["workload"] = shape_of(requests)
    return system_config("pd-disaggregation", replace(base, design_knobs=PDKnobs(**knobs)))


def check_cluster(sim):
    """The invariants at one event (module docstring)."""
    policy, bs = sim.policy, sim.config.engine.block_size
    tabled, owned, homes = Counter(), Counter(), Counter()
    for inst in sim.engine.instances:
        rm, s = inst.rm, inst.scheduler
        is_prefill = inst.inst_id < len(policy.prefill)
        assert rm.pool.num_capacity == (policy.prefill_blocks if is_prefill else policy.decode_blocks)
        assert rm.num_free >= 0 and rm.pool.num_used + rm.pool.num_free == rm.pool.num_capacity
        assert not (s.running if is_prefill else s.waiting), "a prefill instance decodes or a decode one prefills"
        owned.update((inst.inst_id, key) for key in rm.pool.owner)
        homes.update(rm.tables.keys())
        for req_id, table in rm.tables.items():
            for b in table:
                assert b.inst_id == inst.inst_id and rm.pool.owner[(b.device, b.address)] == req_id
                tabled[(b.inst_id, (b.device, b.address))] += 1
        for req_id, n in rm.reserved.items():  # room reserved only for a transfer on its way here
            t = policy.moving[req_id]
            assert t.dst == inst.inst_id and n <= t.num_blocks
        for seq in s.running:  # every token before the newest has its KV here
            assert len(rm.tables[seq.req_id]) * bs >= seq.num_tokens - 1
    assert tabled == owned and all(n == 1 for n in tabled.values())
    assert all(n == 1 for n in homes.values()), "a request homed on two instances"
    for req_id, t in policy.moving.items():  # in flight: still whole at its prefill instance, out of every batch
        src = sim.engine.instances[t.src]
        assert len(src.rm.tables[req_id]) == t.num_blocks and t.num_blocks * bs >= t.seq.num_tokens - 1
        assert t.seq not in src.scheduler.running


def run_checked(config, requests):
    sim = simulator(config, requests)
    sim.on_event = lambda _t: check_cluster(sim)
    return sim, sim.run()


def check_served(config, sim, result, requests):
    """Every request finished or was rejected because its context fits no instance; each finished one generated
    exactly its output (no token lost or made twice in a transfer or a recompute)."""
    bs = config.engine.block_size
    room = min(sim.policy.prefill_blocks, sim.policy.decode_blocks)
    by_id = {r.req_id: r for r in requests}
    for rec in result.requests:
        r = by_id[rec.req_id]
        too_long = num_blocks_for(r.prompt_len + r.output_len, bs) > room
        assert rec.status == (REJECTED if too_long else FINISHED)
    finished = [by_id[rec.req_id] for rec in result.requests if rec.status == FINISHED]
    assert sum(result.step_tokens) == sum(r.output_len for r in finished)
    assert not any(i.rm.tables or i.rm.pool.num_used or i.rm.reserved for i in sim.engine.instances)


def fixed(n, prompt, output, gap_s=0.0):
    return [Request(i, i * gap_s, prompt, output, "fixed") for i in range(n)]


def test_a_memory_short_cluster_queues_transfers_and_preempts_within_its_memory():
    requests = [Request(i, 0.02 * i, 300 + 97 * (i % 13), 40 + 61 * (i % 7), "mix") for i in range(60)]
    config = pd_config(4, num_blocks=24, num_prefill=2, prefill_tp=1, decode_tp=1)
    sim, result = run_checked(config, requests)
    check_served(config, sim, result, requests)
    counters = result.design_counters
    assert counters["decode_preempted_recomputed"] > 0  # decode memory ran out: recomputed on the prefill pool
    assert counters["kv_transfers"] >= sum(r.output_len > 1 for r in requests)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(gpus=st.sampled_from([2, 4]), num_blocks=st.integers(8, 40),
       reqs=st.lists(st.tuples(st.floats(0, 0.5), st.integers(1, 2500), st.integers(1, 300)), min_size=1, max_size=25))
def test_random_request_sets_keep_the_invariants_at_every_event(gpus, num_blocks, reqs):
    arrival, requests = 0.0, []
    for i, (gap, prompt, output) in enumerate(reqs):
        arrival += gap
        requests.append(Request(i, arrival, prompt, output, "random"))
    config = pd_config(gpus, num_blocks=num_blocks, requests=requests)
    sim, result = run_checked(config, requests)
    check_served(config, sim, result, requests)


def test_same_config_and_requests_same_result_bit_for_bit():
    requests = generate(trace_id=0, num_requests=80, rate_per_s=6.0, seed=3)
    config = pd_config(4, requests=requests)
    runs = [simulate(config, requests) for _ in range(2)]
    a, b = ([asdict(r) for r in run.requests] for run in runs)
    assert a == b and runs[0].step_end_s == runs[1].step_end_s
    assert runs[0].design_counters == runs[1].design_counters


def test_transfer_bytes_are_the_prompts_kv_and_a_slower_link_only_delays_decoding():
    requests = fixed(12, 1500, 30, gap_s=0.5)  # light load: no queue, no preemption
    spec = model_spec("llama2-7b")
    kv_per_token = 2 * spec.num_layers * spec.num_kv_heads * spec.head_dim * 2  # K and V, fp16
    runs = {link: simulate(pd_config(4, link=link, num_prefill=2, prefill_tp=1, decode_tp=1), requests)
            for link in ("inter-node", "0.5")}
    for run in runs.values():
        c = run.design_counters
        assert c["kv_transfer_bytes"] == 12 * 1500 * kv_per_token
        assert c["network_bytes_per_token"] == c["kv_transfer_bytes"] / (12 * 30)
        assert 0 < c["kv_transfer_max_s"] <= c["kv_transfer_total_s"]
        assert 0 < c["prefill_pool_utilisation"] <= 1 and 0 < c["decode_pool_utilisation"] <= 1
    fast, slow = runs["inter-node"], runs["0.5"]
    assert slow.design_counters["kv_transfer_total_s"] > fast.design_counters["kv_transfer_total_s"]
    for f, s in zip(fast.requests, slow.requests):
        assert f.first_token_s == s.first_token_s and s.finish_s > f.finish_s


def test_decode_tpot_is_steadier_than_co_located_vllm_m_at_the_same_rate():
    """On vLLM-M a prompt's prefill step stalls every request decoding on its instance; on the split cluster decode
    instances run decode steps only, so the slow tail of TPOT shrinks."""
    requests = generate(trace_id=0, num_requests=200, rate_per_s=4.0, seed=0)
    base = cluster("llama2-7b", GPU, 4)
    pd = simulate(pd_config(4, requests=requests), requests).summary()
    co = simulate(system_config("vllm-m", base), requests).summary()
    assert pd.num_finished == co.num_finished == 200
    assert pd.p99_tpot_ms < co.p99_tpot_ms
    assert pd.p99_tpot_ms / pd.p50_tpot_ms < co.p99_tpot_ms / co.p50_tpot_ms


def test_a_prefill_step_takes_prompts_up_to_its_token_budget_and_a_longer_prompt_alone():
    requests = fixed(10, 3000, 5) + [Request(10, 0.0, 10_000, 5, "long")]

    def prompts_per_prefill_step(budget):
        config = pd_config(4, num_prefill=1, prefill_tp=1, decode_tp=1, prefill_batch_tokens=budget)
        run = simulate(config, requests)
        assert run.summary().num_finished == 11
        return [n for i, n in zip(run.step_inst, run.step_tokens) if i == 0]  # a prefilled prompt: one token
    budgeted = prompts_per_prefill_step(8192)
    assert max(budgeted) == 2 and 1 in budgeted and sum(budgeted) == 11
    assert max(prompts_per_prefill_step(None)) > 2


def test_num_gpus_counts_both_sides_of_a_mixed_split():
    """SimConfig.num_gpus of a split whose prefill and decode shapes differ: every GPU of the base, each side once."""
    base = cluster("llama2-7b", GPU, 4)
    config = system_config("pd-disaggregation", replace(base, design_knobs=PDKnobs(prefill_tp=2, decode_tp=1)))
    k = config.design_knobs
    assert k.prefill_tp != k.decode_tp
    assert config.num_gpus == base.num_gpus == k.num_prefill * k.prefill_tp + config.engine.num_instances - k.num_prefill
