"""Lamina as a serving design: the pipelined step against a brute-force schedule and its bounds, the run's
invariants (every KV block one home at every event, pools within their memory, bit-for-bit repeatable), the
direction of its capacity, and its prefill, network and price against hand arithmetic."""
from collections import Counter
from dataclasses import replace

import pytest
from hypothesis import given, settings, strategies as st

from reference_impl.calibration.perf_model import InstanceLoad, causal_prefill_pairs, step_time_s
from reference_impl.calibration.specs import model_spec
from reference_impl.sim.config import perf_model
from reference_impl.systems.run import simulator, simulate
from reference_impl.systems.lamina.cluster import LaminaKnobs, knobs_of
from reference_impl.systems.pricing import accelerators, price_usd
from reference_impl.systems.lamina.hardware import MEMORY_DEVICE, device, kv_bytes_per_token
from reference_impl.systems.lamina.step_cost import (StepPricer, attention_s, compute_s, network_s,
                                                      pipelined_step_s)
from reference_impl.systems.registry import cluster, system_config
from workloads.request import Request

GPU = "A100-80GB-SXM"


def lamina(model="llama2-7b", gpus=2, **knobs):
    base = cluster(model, GPU, gpus)
    return system_config("lamina", replace(base, design_knobs=LaminaKnobs(**knobs) if knobs else None))


def fixed(n, prompt, output, gap_s=0.0):
    return [Request(i, i * gap_s, prompt, output, "fixed") for i in range(n)]


def flow_shop_s(stages, layers, parts, round_trip=0.0):
    """Each micro-batch passes the three stages per layer; each stage serves the micro-batches in turn; its query's
    trip to the memory devices (before attention) and the output's back (after it) take half the round trip each,
    on no device."""
    free, ready = [0.0] * 3, [0.0] * parts
    for _ in range(layers):
        for j in range(parts):
            t = ready[j]
            for s, d in enumerate(stages):
                t += round_trip / 2 if s == 2 else 0.0
                t = free[s] = max(t, free[s]) + d
            ready[j] = t + round_trip / 2
    return max(ready)


durations = st.floats(0.0, 1.0, allow_nan=False)


@given(st.tuples(durations, durations, durations), st.integers(1, 6), st.integers(1, 4),
       st.one_of(st.just(0.0), st.floats(0.0, 3.0, allow_nan=False)))
def test_pipelined_step_is_the_flow_shop_schedule(stages, layers, parts, round_trip):
    assert pipelined_step_s(*stages, layers, parts, round_trip) == pytest.approx(
        flow_shop_s(stages, layers, parts, round_trip), abs=1e-12)


def test_round_trips_waited_out_without_pipelining_and_filled_with_it():
    """One micro-batch waits every layer's round trip; with two, the other's compute fills a round trip no longer
    than its own idle time (2 x compute - the chain), so only the last layer's shows."""
    c, n, a, r, layers = 1.0, 0.2, 0.3, 0.5, 10
    assert pipelined_step_s(c, n, a, layers, 1, r) - pipelined_step_s(c, n, a, layers, 1) == pytest.approx(layers * r)
    assert pipelined_step_s(c, n, a, layers, 2, r) - pipelined_step_s(c, n, a, layers, 2) == pytest.approx(r)


def test_round_trip_is_two_one_way_latencies_of_the_instances_link():
    """A decode step on a link of 100 us one-way latency lasts layers x 2 x 100 us longer than on one of none, at
    the same bandwidth (one micro-batch: nothing overlaps the wait)."""
    from reference_impl.calibration.model import Link

    config = lamina(micro_batches=1)
    knobs, model = knobs_of(config), perf_model(config)
    steps = [StepPricer(replace(model, link=Link("x", latency_s=latency, bytes_per_s=1e9)), knobs.nic_gb_s_per_gpu,
                        1e12, 1).decode(8, 8 * 1000).duration_s for latency in (0.0, 100e-6)]
    assert steps[1] - steps[0] == pytest.approx(model.num_layers * 2 * 100e-6)
    assert model.link.one_way_latency_s == model.link.time_s(1) > 0  # the measured curve's floor


@settings(max_examples=60, deadline=None)
@given(st.sampled_from([("llama2-7b", 1), ("llama2-13b", 2), ("llama2-70b", 8)]), st.integers(1, 4096),
       st.integers(16, 32768), st.integers(1, 64), st.integers(1, 4))
def test_step_between_its_slowest_stage_and_the_sum_of_the_three(setting, batch, context, devices, parts):
    name, gpus = setting
    config = lamina(name, gpus, memory_devices=devices, micro_batches=parts)
    tp = config.tp
    knobs, model = knobs_of(config), perf_model(config)
    pricer = StepPricer(model, knobs.nic_gb_s_per_gpu, devices * 936.2e9 * 0.5, parts)
    kv = batch * context
    stages = (compute_s(model, batch), network_s(name, batch, tp, knobs.nic_gb_s_per_gpu),
              attention_s(name, kv, pricer.attention_bytes_per_s))
    step = pricer.decode(batch, kv)  # its stages as run (micro-batches) bound it below; no overlap above
    ran = (step.compute_busy_s, step.network_busy_s, step.memory_busy_s)
    waits = model.num_layers * 2 * model.link.one_way_latency_s  # every layer's round trip, on no device
    assert max(max(ran), waits) * (1 - 1e-9) <= step.duration_s <= (min(sum(ran), sum(stages)) + waits) * (1 + 1e-9)
    assert step.memory_busy_s == pytest.approx(stages[2])  # the same KV is read, however it is split


def check_homes(sim):
    """Every rBlock in exactly one request's table and owned there by that request; no pool over its room."""
    for inst in sim.engine.instances:
        pool = inst.rm.pool
        assert pool.num_used + pool.num_free == pool.num_capacity == sim.config.num_blocks
        tabled = Counter((b.inst_id, b.device, b.address) for t in inst.rm.tables.values() for b in t)
        assert all(n == 1 for n in tabled.values())
        assert all(i == inst.inst_id for i, _, _ in tabled)  # KV never leaves its instance's memory devices
        assert len(tabled) == pool.num_used
        for req_id, table in inst.rm.tables.items():
            assert all(pool.owner[(b.device, b.address)] == req_id for b in table)


def test_every_block_one_home_and_pools_within_memory_at_every_event():
    config = lamina(memory_devices=1)  # small pools: preemptions happen
    requests = fixed(60, 3000, 400, gap_s=0.05)
    sim = simulator(config, requests, on_event=lambda t: check_homes(sim))
    result = sim.run()
    assert result.summary().num_finished == 60
    assert sum(r.num_preemptions for r in result.requests) > 0
    usable = device(MEMORY_DEVICE)["mem_gb"] * 1e9  # the pool never holds more KV than its devices' memory
    assert config.num_blocks * config.engine.block_size * kv_bytes_per_token(config.model) <= usable


def test_same_seed_same_result_bit_for_bit():
    from workloads import generate
    config = lamina()
    runs = [simulate(config, generate(trace_id=0, num_requests=80, rate_per_s=8.0, seed=3)) for _ in range(2)]
    a, b = runs
    assert a.step_end_s == b.step_end_s and a.step_tokens == b.step_tokens
    assert [(r.first_token_s, r.finish_s) for r in a.requests] == [(r.first_token_s, r.finish_s) for r in b.requests]
    assert a.design_counters == b.design_counters


def test_more_memory_devices_more_kv_more_batch():
    requests = fixed(200, 4000, 200)  # a burst: the batch is what the memory devices hold
    configs = [lamina(memory_devices=n) for n in (1, 2, 4)]
    blocks = [c.num_blocks for c in configs]
    peaks = [simulate(c, requests).peak_batch_size for c in configs]
    assert blocks[0] < blocks[1] < blocks[2]
    assert peaks[0] < peaks[1] < peaks[2]


def test_first_token_is_prefill_then_kv_move_on_the_nics():
    config, prompt = lamina("llama2-13b", 4), 2000
    result = simulate(config, fixed(1, prompt, 5))
    model = perf_model(config)
    prefill = step_time_s(model, InstanceLoad(0, 0, prefill_tokens=prompt,
                                              prefill_attn_pairs=causal_prefill_pairs(prompt)))
    spec = model_spec("llama2-13b")
    move = prompt * 2 * spec.num_kv_heads * spec.head_dim * 2 * spec.num_layers / (config.tp * 25e9)
    assert result.requests[0].first_token_s == pytest.approx(prefill + move)
    assert result.design_counters["kv_move_s"] == pytest.approx(move)


def test_network_bytes_per_token_by_hand():
    n, prompt, output = 12, 500, 30
    result = simulate(lamina(), fixed(n, prompt, output))
    spec = model_spec("llama2-7b")
    per_decode = spec.num_layers * 4 * spec.hidden_size * 2  # MHA: q, k, v and the output, hidden wide, BF16
    per_prompt_token = 2 * spec.hidden_size * 2 * spec.num_layers
    want = (n * (output - 1) * per_decode + n * prompt * per_prompt_token) / (n * output)
    assert result.design_counters["network_bytes_per_token"] == pytest.approx(want)
    assert 0 < result.design_counters["memory_pool_busy_frac"] < result.design_counters["compute_busy_frac"] < 1


def test_price_and_accelerators_count_memory_devices():
    config = lamina("llama2-70b", 8, memory_devices=5)
    instances = 8 // config.tp
    assert price_usd(config) == 8 * 17500 + instances * 5 * 1600
    assert accelerators(config) == 8 + instances * 5
    base = cluster("llama2-70b", GPU, 8)
    assert price_usd(system_config("vllm-m", base)) == 8 * 17500 and accelerators(base) == 8


def test_step_meter_sees_prefill_and_decode_time():
    from reference_impl.systems.run import simulator
    sim = simulator(lamina(), fixed(4, 1000, 20))
    result = sim.run()
    meter = sim.backend.meter
    assert 0 < meter.prefill_step_s < meter.step_s
    assert meter.step_s <= max(r.finish_s for r in result.requests) * sim.config.engine.num_instances


def test_memory_devices_of_a_measured_machine_set_the_attention_rate_and_the_pool():
    """sim-vs-real's Lamina arm stands the memory devices in by what a machine measured: the default's own rate and
    capacity, given as knobs, simulate the same run; a slower rate lengthens the run, a set pool is the blocks."""
    from reference_impl.systems.lamina.cluster import kv_capacity_tokens
    from reference_impl.systems.lamina.hardware import memory_attention_bytes_per_s

    default = lamina()
    devices = knobs_of(default).memory_devices
    rate, tokens = memory_attention_bytes_per_s(GPU, devices), kv_capacity_tokens(default, devices)
    same = lamina(attention_bytes_per_s=rate, pool_tokens=tokens)
    requests = fixed(16, 1000, 50)
    assert same.num_blocks == default.num_blocks
    assert simulate(same, requests).step_end_s == simulate(default, requests).step_end_s
    assert simulate(lamina(attention_bytes_per_s=rate / 8), requests).end_s > simulate(default, requests).end_s
    block = default.engine.block_size
    assert lamina(pool_tokens=100 * block).num_blocks == 100
    with pytest.raises(Exception, match="KV read rate must be > 0"):
        LaminaKnobs(attention_bytes_per_s=0.0)
