"""sim-vs-real's vLLM arm without vLLM: the step-time fit, the step extraction from the runner's timeline, the skip."""
import pytest

from baselines.real_vllm.backend import VllmRun
from baselines.real_vllm.profile import StepGrid, decode_steps, grid_rounds, grid_steps, prefill_steps
from reference_impl.calibration.coefficients import dumps
from reference_impl.calibration.curve import Curve
from reference_impl.calibration.engine_steps import DecodeStep, PrefillStep, fit_engine_steps
from reference_impl.calibration.model import CalibratedPerfModel
from reference_impl.calibration.specs import model_spec
from reference_impl.calibration.perf_model import InstanceLoad, causal_prefill_pairs, step_time_s
from repro.framework.base import RunParams

MODEL = "llama-tiny"
HW = "test-cpu"


def ops_doc() -> dict:
    """An op-level profile by hand: a non-attention line, a KV read rate the engine does not have, no overhead."""
    curve = {"x": [1, 2048], "y": [1e-4, 2048 * 5e-5]}
    return {"format": "infinite-llm-repro/calibration/1", "profile": {"model": MODEL},
            "hardware": {HW: {"dtype_bytes": 4, "mem_bytes": 1e11, "gpus_per_node": 1,
                              "non_attention_s": {MODEL: {"1": curve}}, "all_reduce_s": {},
                              "send_recv_s": {"intra-node": {"x": [4096], "y": [1e-6]}},
                              "attention": {"kv_read_bytes_per_s": 1e12, "prefill_attn_flops_per_s": 1e10,
                                            "derivation": "by hand"},
                              "step_overhead_s": {MODEL: {"decode": {"x": [1], "y": [1.0]},
                                                          "prefill": {"x": [1], "y": [1.0]}}}}}}


def model_of(doc, tmp_path) -> CalibratedPerfModel:
    path = tmp_path / "fit.json"
    path.write_text(dumps(doc))
    return CalibratedPerfModel.for_setting(model=MODEL, gpu=HW, link="intra-node", coefficients_path=path)


def test_the_fit_recovers_a_known_engine_from_its_steps(tmp_path):
    # An engine with its own attention (2 GB/s) and a per-step cost of 3 ms + 0.1 ms per request (decode) or
    # 5 ms + 2 us per prompt token (prefill), on top of the op-level non-attention line.
    spec = model_spec(MODEL)
    kv_bytes = 2 * spec.num_kv_heads * spec.head_dim * 4
    non_attention = Curve.from_json(ops_doc()["hardware"][HW]["non_attention_s"][MODEL]["1"])
    prefill_rate = 1e10

    def decode_s(b, kv):
        return spec.num_layers * (non_attention(b) + kv * kv_bytes / 2e9) + 3e-3 + 1e-4 * b

    def prefill_s(k, n):
        pairs = k * causal_prefill_pairs(n)
        return spec.num_layers * (non_attention(k * n) + pairs * 4 * spec.hidden_size / prefill_rate) + 5e-3 + 2e-6 * k * n

    decode = [DecodeStep(b, kv, decode_s(b, kv)) for b in (1, 4, 16) for kv in (b * 64,)]
    decode += [DecodeStep(16, kv, decode_s(16, kv)) for kv in (16 * 32, 16 * 96, 16 * 128)]
    prefill = [PrefillStep(k, 40, prefill_s(k, 40)) for k in (1, 4, 16)]
    doc = fit_engine_steps(ops_doc(), HW, MODEL, decode, prefill, kv_batch=16, engine="fake", source="test")
    hw = doc["hardware"][HW]
    assert hw["attention"]["kv_read_bytes_per_s"] == pytest.approx(2e9, rel=1e-5)
    assert doc["profile"]["engine"] == "fake" and hw["step_overhead_s"][MODEL]["decode"]["source"] == "test"
    fitted = model_of(doc, tmp_path)
    # steps it was not fitted on: another batch size and context, another prompt count
    assert step_time_s(fitted, InstanceLoad(8, 8 * 100)) == pytest.approx(decode_s(8, 8 * 100), rel=1e-4)
    load = InstanceLoad(0, 0, prefill_tokens=8 * 40, prefill_attn_pairs=8 * causal_prefill_pairs(40))
    assert step_time_s(fitted, load) == pytest.approx(prefill_s(8, 40), rel=1e-4)
    assert ops_doc()["hardware"][HW]["attention"]["kv_read_bytes_per_s"] == 1e12  # the input is left alone


def test_a_kv_rate_that_time_does_not_show_keeps_the_op_level_rate(tmp_path):
    flat = [DecodeStep(4, kv, 0.01) for kv in (128, 256, 512)]
    doc = fit_engine_steps(ops_doc(), HW, MODEL, flat, [PrefillStep(1, 16, 0.02)], kv_batch=4, engine="fake",
                           source="test")
    attention = doc["hardware"][HW]["attention"]
    assert attention["kv_read_bytes_per_s"] == 1e12 and "op-level rate is kept" in attention["derivation"]
    overhead = doc["hardware"][HW]["step_overhead_s"][MODEL]["decode"]
    assert all(y > 0 for y in overhead["y"])


def run_of(ends, tokens) -> VllmRun:
    return VllmRun([], [], "test", 0.0, ends[-1], step_end_s=list(ends), step_tokens=list(tokens))


def test_decode_steps_are_the_gaps_between_full_batch_steps_after_a_warm_up():
    # vLLM's engine core starts on the first prompt while the others are added: 1 token, then 3, then 4 a step
    ends, tokens = [0.05, 0.20, 0.23, 0.26, 0.30, 0.35], [1, 3, 4, 4, 4, 4]
    steps = decode_steps(run_of(ends, tokens), batch_size=4, context_len=30, block_size=32)
    assert [s.step_s for s in steps] == pytest.approx([0.04, 0.05])  # 0.23-0.26 is the warm-up, left out
    assert all(s.batch_size == 4 for s in steps)
    assert [s.kv_tokens for s in steps] == [4 * 64, 4 * 64]  # 30 + 3 or 4 tokens: two blocks of 32 each
    assert steps[0].kv_tokens <= steps[-1].kv_tokens


def test_prefill_steps_split_a_round_by_the_prompts_each_step_finished():
    steps = prefill_steps(run_of([0.03, 0.10], [1, 7]), prompt_len=50)
    assert [(s.num_prompts, s.prompt_len) for s in steps] == [(1, 50), (7, 50)]
    assert [s.step_s for s in steps] == pytest.approx([0.03, 0.07])


def test_grid_rounds_and_steps_line_up():
    import numpy as np

    grid = StepGrid(decode_batches=(1, 2), context_len=20, kv_batch=2, kv_context_lens=(10, 20), decode_steps=3,
                    prefill_prompts=(1, 2), prompt_len=16, prefill_repeats=1)
    rounds = grid_rounds(grid, vocab_size=100, rng=np.random.default_rng(0))
    assert [len(r) for r in rounds] == [1, 2, 2, 1, 1, 2, 2]  # decode (1, 20), (2, 20), (2, 10); prefill 1, 1, 2, 2
    assert all(len(req["prompt_ids"]) == 20 for req in rounds[0] + rounds[1])
    assert all(req["max_tokens"] == 1 for r in rounds[3:] for req in r)
    decode_run = lambda b: run_of([0.1 * (i + 1) for i in range(5)], [b] * 5)  # noqa: E731
    runs = [decode_run(1), decode_run(2), decode_run(2)] + [run_of([0.2], [k]) for k in (1, 1, 2, 2)]
    decode, prefill = grid_steps(grid, runs, block_size=16)
    assert len(decode) == 3 * 3 and [s.num_prompts for s in prefill] == [1, 2]  # warm-up rounds left out


def test_without_vllm_the_arm_is_skipped_with_the_reason(monkeypatch, tmp_path):
    from repro.experiments.sim_vs_real.experiment import _vllm_status, run_id

    monkeypatch.setenv("VLLM_PYTHON", str(tmp_path / "no-python"))
    why = _vllm_status("auto", "cpu")
    assert why.startswith("skipped:") and "make setup-vllm" in why and "\n" not in why
    assert _vllm_status("off", "cpu") == "skipped: --param vllm=off"
    assert _vllm_status("auto", "cuda").startswith("skipped: the vLLM arm runs vLLM's CPU build only")
    assert run_id(RunParams(quick=True, extra={"vllm": "auto", "clock": "cpu"})) == "local-quick-seed0"


def test_bad_vllm_param_is_one_line(tmp_path, capsys):
    from repro.cli import main

    with pytest.raises(SystemExit) as info:
        main(["run", "--experiment", "sim-vs-real", "--quick", "--results-dir", str(tmp_path), "--param", "vllm=yes"])
    err = capsys.readouterr().err.strip()
    assert info.value.code == 2 and "choose one of auto, off" in err and "\n" not in err
    assert list(tmp_path.iterdir()) == []


def test_steps_to_first_token_counts_the_steps_a_request_waits_on_a_busy_engine():
    from reference_impl.serving.records import FINISHED, RequestRecord, ServingRun
    from repro.experiments.sim_vs_real.vllm_arm import steps_to_first_token

    # steps end every 10 ms; request 0 decodes throughout; 1 arrives at 12 ms and gets its token at 30 ms (2
    # steps: the one in flight, then its own); 2 arrives at 41 ms and waits one step more (token at 70 ms)
    ends = [0.01 * i for i in range(1, 11)]
    reqs = [RequestRecord(0, 0.0, 8, 10, status=FINISHED, first_token_s=0.01, finish_s=0.10),
            RequestRecord(1, 0.012, 8, 3, status=FINISHED, first_token_s=0.03, finish_s=0.05),
            RequestRecord(2, 0.041, 8, 3, status=FINISHED, first_token_s=0.07, finish_s=0.09)]
    assert steps_to_first_token(ServingRun(reqs, ends, [1] * 10)) == 2.5
    assert steps_to_first_token(ServingRun(reqs[:1], ends, [1] * 10)) is None  # nobody arrived on a busy engine
