"""lamina (lamina Fig 13): the offloading arithmetic on hand-computed cases, and the quick run end to end."""
import json

import pytest

from reference_impl.calibration import CalibratedPerfModel
from reference_impl.systems.lamina.hardware import attention_efficiency, kv_bytes_per_token
from repro.experiments.lamina import arithmetic as lamina
from repro.experiments.lamina.experiment import EXPERIMENT
from repro.framework.base import RunParams
from repro.results import load_results, run_and_save


def test_kv_bytes_per_token_from_the_model_dims():
    assert kv_bytes_per_token("llama2-13b") == 2 * 40 * 128 * 2 * 40  # MHA: 40 KV heads, 40 layers
    assert kv_bytes_per_token("llama2-70b") == 2 * 8 * 128 * 2 * 80  # GQA: 8 KV heads, 80 layers


def test_lamina_step_by_hand():
    ctx, n = 1024, 2
    c = lamina.lamina_config("llama2-13b", ctx, 1, n, overlap=True)
    m = CalibratedPerfModel.for_setting(model="llama2-13b", gpu=lamina.GPU, tp=1, link="intra-node")
    usable_bytes = 24e9 * (1 - m.memory.reserve_bytes / m.memory.mem_bytes)
    batch = int(n * usable_bytes // (ctx * 819200))
    assert c.batch == batch
    assert c.attention_s == pytest.approx(batch * ctx * 819200 / (n * 936.2e9 * attention_efficiency(lamina.GPU)))
    assert c.network_s == pytest.approx(40 * batch * (4 * 5120) * 2 / 25e9)  # q, k, v out, output back
    assert c.step_s == max(c.compute_s, c.attention_s, c.network_s)
    assert c.cost_usd == 17500 + n * 1600
    serial = lamina.lamina_config("llama2-13b", ctx, 1, n, overlap=False)
    inter_node = CalibratedPerfModel.for_setting(model="llama2-13b", gpu=lamina.GPU, tp=1, link="inter-node").link
    assert serial.round_trips_s == pytest.approx(40 * 2 * inter_node.time_s(1))  # 40 layers, query out, output back
    assert serial.step_s == pytest.approx(c.compute_s + c.attention_s + c.network_s + serial.round_trips_s)


def test_vllm_batch_is_what_fits_and_attention_efficiency_is_a_fraction():
    m = CalibratedPerfModel.for_setting(model="llama2-13b", gpu=lamina.GPU, tp=2, link="intra-node")
    assert lamina.vllm_config("llama2-13b", 4096, 2).batch == m.memory.kv_capacity_tokens // 4096
    assert lamina.vllm_config("llama2-70b", 4096, 1) is None  # 138 GB of weights do not fit one GPU
    assert 0.3 < attention_efficiency(lamina.GPU) < 1.0


def test_quick_run_schema_figure_and_claims(tmp_path):
    exp = EXPERIMENT
    path, _ = run_and_save(exp, RunParams(quick=True), tmp_path, log=lambda m: None)
    rows = json.loads(path.read_text())["data"]["rows"]
    assert {(r["model"], r["context"]) for r in rows} == {(m, c) for m in lamina.MODELS for c in lamina.QUICK_CONTEXTS}
    assert {r["system"] for r in rows} == {"vLLM", "Lamina", "Lamina (no overlap)", lamina.SAME_GPUS}
    for r in rows:  # the same-GPU baseline runs on the tp Lamina picked, without memory devices
        if r["system"] == lamina.SAME_GPUS:
            (pick,) = [x for x in rows
                       if x["system"] == "Lamina" and (x["model"], x["context"]) == (r["model"], r["context"])]
            assert r["tp"] == pick["tp"] and r["memory_devices"] == 0
    results = load_results(tmp_path, exp)
    assert exp.plot(results, str(tmp_path))[0].endswith("lamina-fig13.png")
    for r in rows:  # decode: one token per request and step; price per thousand dollars
        assert r["tok_s"] == pytest.approx(r["batch"] / r["step_s"])
        assert r["tok_s_per_kusd"] == pytest.approx(r["tok_s"] / (r["cost_usd"] / 1000))
        assert r["step_s"] >= r["compute_s"] > 0
    by = {(r["model"], r["context"], r["system"]): r for r in rows}
    expected = {"per_dollar": [], "batch": [], "tput": []}
    for model, context in {(r["model"], r["context"]) for r in rows}:
        lam, vllm = by[(model, context, "Lamina")], by[(model, context, "vLLM")]
        serial, same = by[(model, context, "Lamina (no overlap)")], by[(model, context, lamina.SAME_GPUS)]
        assert lam["step_s"] <= serial["step_s"] * (1 + 1e-9)  # overlap never slows a step
        assert lam["batch"] >= same["batch"]  # memory devices only add room for KV
        expected["per_dollar"].append(lam["tok_s_per_kusd"] / vllm["tok_s_per_kusd"])
        if same["batch"]:
            expected["batch"].append(lam["batch"] / same["batch"])
            expected["tput"].append(lam["tok_s"] / same["tok_s"])
    claims = exp.claims(results)
    assert len(claims) == 6 and {r.claim_id for r in claims} == {"lamina-thpt-per-dollar"}
    got = [r.reproduced for r in claims]
    want = [f(expected[k]) for k in ("per_dollar", "batch", "tput") for f in (min, max)]
    assert got == pytest.approx(want)
    assert min(expected["batch"]) >= 1 and all(lo <= hi for lo, hi in zip(got[::2], got[1::2]))


def test_served_trace_decodes_at_the_figures_context():
    from repro.experiments.lamina.serving import fig13_requests
    requests = fig13_requests(4096, 50, 2.0, seed=1)
    assert {r.prompt_len + r.output_len / 2 for r in requests} == {4096}  # the KV's mean over the decode
    assert [r.arrival_s for r in requests] == sorted(r.arrival_s for r in requests)


def test_served_clusters_are_the_arithmetics_and_each_step_down_is_a_cost():
    from reference_impl.systems.pricing import price_usd
    from reference_impl.systems.registry import system_config
    from repro.experiments.lamina.serving import SYSTEMS, explain, groups
    for pick, g in groups(("llama2-13b",), (2048,)):
        config = system_config(g.systems[0], g.base)
        assert price_usd(config) == pick.cost_usd and config.tp == pick.tp
        if pick.system == "Lamina":  # the memory devices hold the arithmetic's batch at its context
            assert config.num_blocks * config.engine.block_size >= pick.batch * pick.context
        steps = explain(pick, config)
        assert steps["with_prefill_tok_s"] < steps["pipeline_tok_s"] <= pick.tok_s * (1 + 1e-12)
        assert g.info["num_requests"] >= 3 * pick.batch and g.systems == (SYSTEMS[pick.system],)


def test_a_served_point_carries_the_designs_counters():
    from repro.experiments.lamina.serving import groups, run_with_counters
    from repro.serving.tasks import PointTask
    (pick, g), = [x for x in groups(("llama2-13b",), (1024,)) if x[0].system == "Lamina"]
    requests = tuple(g.make_requests(4.0, 0)[:40])
    point = run_with_counters(PointTask("lamina", g.base, requests, 4.0, "test"))
    assert point["num_finished"] == 40
    assert 0 < point["counters"]["memory_pool_busy_frac"] < point["counters"]["compute_busy_frac"] <= 1
    assert point["counters"]["kv_move_s_per_request"] > 0
