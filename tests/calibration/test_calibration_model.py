"""CalibratedPerfModel: the PerfModel protocol, sanity of its shape, memory facts, bad settings, speed."""
import json
import time
from pathlib import Path

import pytest

from reference_impl.calibration import CalibratedPerfModel, Link, MemoryModel
from reference_impl.calibration.coefficients import DEFAULT_PATH
from reference_impl.calibration.specs import model_spec
from reference_impl.errors import InputError
from reference_impl.calibration.perf_model import InstanceLoad, causal_prefill_pairs, step_time_s, throughput_tok_s

A100 = "A100-80GB-SXM"
SETTINGS = [("llama2-7b", 1), ("llama2-7b", 2), ("llama2-13b", 2), ("llama2-70b", 4), ("llama2-70b", 8)]
HW_JSON = Path(__file__).resolve().parents[3] / "shared/data/paper/hardware_and_models.json"


def model_for(name="llama2-7b", tp=1, **kw):
    return CalibratedPerfModel.for_setting(model=name, gpu=A100, tp=tp, **kw)


@pytest.mark.parametrize("name,tp", SETTINGS)
def test_layer_time_grows_with_work(name, tp):
    m = model_for(name, tp)
    # Doubling the tokens never makes a layer faster, beyond the 5% the rows' own tile effects allow
    # (e.g. LLaMA2-13B TP2: 4.8% faster at some doublings, as measured).
    for n in range(1, 5000, 7):
        assert m.layer_time_s(InstanceLoad(2 * n, 0)) >= 0.95 * m.layer_time_s(InstanceLoad(n, 0)), n
    assert m.layer_time_s(InstanceLoad(4096, 0)) > 3 * m.layer_time_s(InstanceLoad(1, 0))
    base = InstanceLoad(batch_size=8, attn_kv_tokens=10_000)
    t = m.layer_time_s(base)
    assert m.layer_time_s(InstanceLoad(8, 10_001)) > t
    assert m.layer_time_s(InstanceLoad(8, 10_000, num_remote_queries=1)) > t
    assert m.layer_time_s(InstanceLoad(8, 10_000, prefill_attn_pairs=causal_prefill_pairs(512))) > t
    assert m.layer_time_s(InstanceLoad(0, 0)) == 0.0 and throughput_tok_s(m, InstanceLoad(0, 0)) == 0.0
    assert step_time_s(m, base) == pytest.approx(m.num_layers * t)


def test_attention_term_is_kv_bytes_over_the_measured_rate():
    m = model_for("llama2-7b")
    doc = json.loads(DEFAULT_PATH.read_text())
    rate = doc["hardware"][A100]["attention"]["kv_read_bytes_per_s"]
    extra = m.layer_time_s(InstanceLoad(4, 200_000)) - m.layer_time_s(InstanceLoad(4, 100_000))
    assert extra == pytest.approx(100_000 * 2 * 4096 * 2 / rate, rel=1e-9)
    # Eq. 6: a debtor that hands K tokens to a creditor saves exactly what the creditor pays
    debtor_saves = m.layer_time_s(InstanceLoad(4, 300_000)) - m.layer_time_s(InstanceLoad(4, 300_000 - 4096))
    creditor_pays = m.layer_time_s(InstanceLoad(60, 20_000 + 4096)) - m.layer_time_s(InstanceLoad(60, 20_000))
    assert debtor_saves == pytest.approx(creditor_pays, rel=1e-9)


def test_parallelism_and_links_move_time_the_right_way():
    big = InstanceLoad(batch_size=4096, attn_kv_tokens=0)
    assert model_for("llama2-13b", 2).layer_time_s(big) < model_for("llama2-13b", 1).layer_time_s(big)
    remote = InstanceLoad(8, 1000, num_remote_queries=8)
    intra, inter = model_for(link="intra-node"), model_for(link="inter-node")
    ethernet = model_for(link=0.125)  # the paper's printed 125 MB/s
    assert intra.layer_time_s(remote) < inter.layer_time_s(remote) < ethernet.layer_time_s(remote)
    assert ethernet.link == Link("0.125 GB/s", latency_s=ethernet.link.latency_s, bytes_per_s=0.125e9)
    assert intra.kv_transfer_s(16) < inter.kv_transfer_s(16) < inter.kv_transfer_s(1600)
    pp = CalibratedPerfModel.for_setting(model="llama2-7b", gpu=A100, tp=8, pp=2)
    assert pp.pp_link.name == "inter-node"  # 16 GPUs span two 8-GPU nodes
    assert pp.layer_time_s(InstanceLoad(64, 0)) > model_for("llama2-7b", 8).layer_time_s(InstanceLoad(64, 0))


def test_memory_matches_the_model_configs():
    m = model_for("llama2-7b").memory
    assert m.kv_bytes_per_token_per_gpu == 2 * 32 * 128 * 2 * 32
    assert m.weight_bytes_per_gpu / 2 == pytest.approx(6.74e9, rel=0.01)
    assert 100_000 < m.kv_capacity_tokens < 120_000  # (80 GB - 10% reserve - 13.5 GB) / 512 KiB
    caps = [model_for("llama2-70b", tp).memory.kv_capacity_tokens for tp in (2, 4, 8)]
    assert caps == sorted(caps) and caps[0] > 0
    if HW_JSON.is_file():  # cross-check the copied facts against the shared table when it is there
        models = json.loads(HW_JSON.read_text())["models"]
        for name in ("llama2-7b", "llama2-13b", "llama2-70b"):
            spec = model_spec(name)
            one_gpu = MemoryModel.for_setting(spec, tp=1, pp=1, dtype_bytes=2, mem_bytes=80e9, reserve_fraction=0.1)
            assert one_gpu.kv_bytes_per_token_per_gpu == models[name]["kv_bytes_per_token_fp16"]
            assert one_gpu.weight_bytes_per_gpu / 2e9 == pytest.approx(models[name]["params_b"], rel=0.01)


@pytest.mark.parametrize("kwargs,message", [
    (dict(model="gpt-5", gpu=A100), "unknown model 'gpt-5'"),
    (dict(model="llama2-7b", gpu="TPU-v9"), "no calibration for GPU 'TPU-v9'"),
    (dict(model="llama2-7b", gpu=A100, tp=3), "tp=3 does not divide llama2-7b's 32 attention heads"),
    (dict(model="llama2-7b", gpu=A100, tp=16), "no profile of llama2-7b at tp=16"),
    (dict(model="llama2-7b", gpu=A100, pp=3), "pp=3 does not divide"),
    (dict(model="llama2-70b", gpu=A100, tp=1), "does not fit"),
    (dict(model="llama2-7b", gpu=A100, link="carrier-pigeon"), "unknown link 'carrier-pigeon'"),
    (dict(model="llama2-7b", gpu=A100, link=-1), "must be > 0"),
    (dict(model="llama2-7b", gpu=A100, coefficients_path="/nonexistent/c.json"), "does not exist"),
])
def test_bad_settings_are_one_line_input_errors(kwargs, message):
    with pytest.raises(InputError, match=message) as info:
        CalibratedPerfModel.for_setting(**kwargs)
    assert "\n" not in str(info.value)


def test_a_file_that_is_not_a_calibration_is_refused(tmp_path):
    bad = tmp_path / "c.json"
    bad.write_text(json.dumps({"format": "infinite-llm-repro/calibration/1", "hardware": {"x": {}}}))
    with pytest.raises(InputError, match="is not a calibration file"):
        CalibratedPerfModel.for_setting(model="llama2-7b", gpu="x", coefficients_path=bad)


def test_one_layer_time_call_is_cheap():
    m = model_for("llama2-70b", 4)
    load = InstanceLoad(batch_size=37, attn_kv_tokens=123_456, num_remote_queries=3, prefill_tokens=200,
                        prefill_attn_pairs=causal_prefill_pairs(200, 1000))
    calls = 20_000
    best_s = float("inf")
    for _ in range(3):  # best of three, in CPU time of this process: the machine is shared
        start = time.process_time()
        for _ in range(calls):
            m.layer_time_s(load)
        best_s = min(best_s, (time.process_time() - start) / calls)
    assert best_s < 20e-6, f"{best_s * 1e6:.1f} us per call"


def test_layer_time_memo_equals_the_sum_and_a_replaced_model_starts_its_own():
    from dataclasses import replace

    from reference_impl.calibration.curve import Curve
    from reference_impl.calibration.model import MEMO_TOKENS, CalibratedPerfModel
    from reference_impl.calibration.perf_model import InstanceLoad

    model = CalibratedPerfModel.for_setting(model="llama2-7b", gpu="A100-80GB-SXM", tp=2, pp=2)
    for tokens in (1, 7, 256, MEMO_TOKENS, MEMO_TOKENS + 1):
        load = InstanceLoad(tokens, 1000 * tokens)
        first, again = model.layer_time_s(load), model.layer_time_s(load)
        assert first == again == model.tokens_s(tokens) + 1000 * tokens * model.kv_read_s_per_token
    assert MEMO_TOKENS in model._tokens_s and MEMO_TOKENS + 1 not in model._tokens_s
    slower = replace(model, non_attention=Curve(model.non_attention.xs, tuple(2 * y for y in model.non_attention.ys)))
    assert slower._tokens_s == {} and slower.layer_time_s(InstanceLoad(7, 0)) > model.layer_time_s(InstanceLoad(7, 0))
