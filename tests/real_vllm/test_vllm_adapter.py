"""The real-vLLM adapter's pure logic: dispatch, config translation, job building, result mapping, errors.

No vLLM needed; the end-to-end tier is tests/vllm (`make test-vllm`)."""
import json
import sys

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from baselines.real_vllm import backend as vllm_backend
from baselines.real_vllm.backend import build_job, check_vllm, random_prompts, requests_of, run_job, stage_runner
from baselines.real_vllm.compare import agreement
from baselines.real_vllm.config import VllmSetup, engine_env, engine_kwargs
from baselines.real_vllm.dispatch import REJECTED, MostFreeDispatcher
from baselines.real_vllm.metrics import ServedRequest, from_runner, serving_point, summarize
from baselines.real_vllm.model import save_hf_folder
from reference_impl.errors import InputError
from reference_impl.model.llama import TINY, load_model, random_model


def test_dispatch_goes_to_most_free_engine_and_tracks_growth():
    d = MostFreeDispatcher(num_engines=3, blocks_per_engine=10, block_size=4)
    assert d.choose("a", 8, 4) == 0  # ties: lowest index
    assert d.choose("b", 4, 4) == 1
    assert d.choose("c", 1, 4) == 2
    assert [d.free_blocks(e) for e in range(3)] == [8, 9, 9]
    assert d.choose("d", 4, 4) == 1
    d.on_tokens("a", 13)  # 'a' grew from 2 to 4 blocks
    assert d.free_blocks(0) == 6
    d.on_finish("b")
    d.on_finish("d")
    assert d.free_blocks(1) == 10
    assert d.choose("e", 4, 4) == 1
    assert d.choose("huge", 40, 1) == REJECTED  # 11 blocks never fit an engine of 10
    assert "huge" not in d.live
    capped = MostFreeDispatcher(num_engines=1, blocks_per_engine=10, block_size=4, max_request_tokens=20)
    assert capped.choose("long", 18, 3) == REJECTED and capped.choose("ok", 17, 3) == 0


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 30), st.integers(1, 30), st.integers(0, 40)), min_size=1, max_size=25))
def test_dispatch_accounting_returns_to_zero(reqs):
    d = MostFreeDispatcher(num_engines=3, blocks_per_engine=16, block_size=4)
    for i, (prompt, out, grow) in enumerate(reqs):
        engine = d.choose(i, prompt, out)
        if engine == REJECTED:
            assert -(-(prompt + out) // 4) > 16
            continue
        before = [d.free_blocks(e) for e in range(3)]
        d.on_tokens(i, prompt + min(grow, out))
        assert sum(d.free_blocks(e) for e in range(3)) <= sum(before)
    assert sum(d.used_blocks) == sum(-(-held // 4) for _, held in d.live.values())
    for req_id in list(d.live):
        d.on_finish(req_id)
    assert d.used_blocks == [0, 0, 0]


def test_vllm_m_and_vllm_s_layouts():
    assert VllmSetup("vllm-m", num_devices=32, tp=4).layouts == [(4, 1)] * 8
    assert VllmSetup("vllm-s", num_devices=32).layouts == [(8, 4)]
    assert VllmSetup("vllm-s", num_devices=4).layouts == [(4, 1)]
    assert VllmSetup("vllm-m").layouts == [(1, 1)]


@pytest.mark.parametrize("kwargs, match", [
    ({"policy": "vllm-x"}, "unknown vLLM policy"), ({"device": "tpu"}, "unknown device"),
    ({"num_devices": 6, "tp": 4}, "do not split"), ({"policy": "vllm-s", "num_devices": 12}, "whole nodes"),
    ({"tp": 16, "num_devices": 16}, "does not fit a node"), ({"blocks_per_engine": 3, "max_model_len": 100}, "hold less"),
    ({"max_model_len": 0}, ">= 1"),
])
def test_bad_setups_are_input_errors(kwargs, match):
    with pytest.raises(InputError, match=match):
        VllmSetup(**kwargs)


def test_engine_kwargs_translate_the_setup():
    cpu = engine_kwargs(VllmSetup("vllm-m", 2, blocks_per_engine=40, block_size=32, max_model_len=1024), "/m")
    assert len(cpu) == 2
    k = cpu[0]
    assert k["model"] == "/m" and k["skip_tokenizer_init"] and k["dtype"] == "float32"
    assert (k["tensor_parallel_size"], k["pipeline_parallel_size"]) == (1, 1)
    assert k["num_gpu_blocks_override"] == 41 and k["block_size"] == 32 and k["max_model_len"] == 1024
    assert k["enable_prefix_caching"] is False and k["enforce_eager"] is True
    assert "distributed_executor_backend" not in k
    (gpu,) = engine_kwargs(VllmSetup("vllm-s", 16, device="cuda", dtype="bfloat16"), "/m")
    assert (gpu["tensor_parallel_size"], gpu["pipeline_parallel_size"]) == (8, 2)
    assert gpu["distributed_executor_backend"] == "ray" and "enforce_eager" not in gpu
    assert "num_gpu_blocks_override" not in gpu
    assert engine_env(VllmSetup(cpu_threads=2))["VLLM_CPU_OMP_THREADS_BIND"] == "0-1"
    assert engine_env(VllmSetup("vllm-s", 2))["VLLM_CPU_OMP_THREADS_BIND"] == "0|1"
    assert engine_env(VllmSetup("vllm-s", 2, cpu_threads=2))["VLLM_CPU_OMP_THREADS_BIND"] == "0-1|2-3"
    assert "VLLM_CPU_OMP_THREADS_BIND" not in engine_env(VllmSetup())
    assert engine_env(VllmSetup(device="cuda", cpu_threads=1)) == {}


def test_build_job_checks_lengths_and_defaults_arrivals():
    setup = VllmSetup(blocks_per_engine=8, max_model_len=64)
    requests = requests_of([[1, 2, 3], [4] * 70], [5, 6], [0.0, 1.5])
    job = build_job(setup, "/m", [requests, requests_of([[1]], [1])])
    assert [r["arrival_s"] for r in job["rounds"][0]] == [0.0, 1.5]
    assert job["blocks_per_engine"] == 8 and job["env"]["VLLM_CPU_KVCACHE_SPACE"] == "1"
    assert job["max_model_len"] == 64 and job["block_size"] == 32
    assert [r["max_tokens"] for r in job["rounds"][0]] == [5, 6]  # too long for 64: the runner rejects it
    assert [r["arrival_s"] for r in job["rounds"][1]] == [0.0]
    json.dumps(job)
    with pytest.raises(InputError, match="one entry per request"):
        requests_of([[1]], [1, 2])
    with pytest.raises(InputError, match="no requests"):
        requests_of([], [])


def test_random_prompts_are_seeded_and_in_vocabulary():
    a = random_prompts([5, 9], 100, np.random.default_rng(3))
    assert a == random_prompts([5, 9], 100, np.random.default_rng(3))
    assert [len(p) for p in a] == [5, 9] and all(0 <= t < 100 for p in a for t in p)


def test_runner_records_map_to_summary():
    requests = [{"req_id": 0, "prompt_ids": [1] * 10, "max_tokens": 5, "arrival_s": 0.0},
                {"req_id": 1, "prompt_ids": [1] * 4, "max_tokens": 3, "arrival_s": 1.0},
                {"req_id": 2, "prompt_ids": [1] * 4, "max_tokens": 3, "arrival_s": 1.0}]
    records = [
        {"req_id": 0, "engine": 0, "arrival_s": 0.0, "first_token_s": 0.5, "finish_s": 2.5, "output_ids": [1] * 5,
         "status": "finished"},
        {"req_id": 1, "engine": 1, "arrival_s": 1.0, "first_token_s": 1.2, "finish_s": 4.0, "output_ids": [2] * 3,
         "status": "finished"},
        {"req_id": 2, "engine": None, "arrival_s": 1.0, "first_token_s": None, "finish_s": None, "output_ids": [],
         "status": "rejected"}]
    served = from_runner(records, requests)
    assert [r.output_len for r in served] == [5, 3, 3] and served[2].status == "rejected"
    s = summarize(served)
    assert (s.num_requests, s.num_finished, s.num_failed) == (3, 2, 1)
    assert s.makespan_s == pytest.approx(4.0) and s.output_tok_s == pytest.approx(8 / 4.0)
    assert s.num_rejected == 1 and s.window_tok_s == pytest.approx(0.0)  # no step timeline given
    timed = summarize(served, step_end_s=[0.5, 0.9, 1.2, 3.0], step_tokens=[1, 2, 4, 1])
    assert timed.window_tok_s == pytest.approx((1 + 2) / 1.0)  # steps inside the arrival window [0, 1]
    point = serving_point("vllm-m", 2.0, timed, wall_s=4.5)
    assert point["num_unfinished"] == 0 and point["num_rejected"] == 1 and point["mean_ttft_s"] == pytest.approx(0.35)
    assert point["output_tok_s"] == pytest.approx(2.0) and point["wall_s"] == 4.5
    assert s.total_tok_s == pytest.approx((8 + 14) / 4.0)
    assert s.mean_ttft_ms == pytest.approx((500 + 200) / 2)
    assert s.mean_tpot_ms == pytest.approx((2.0 / 4 + 2.8 / 2) / 2 * 1e3)
    assert s.mean_latency_s == pytest.approx((2.5 + 3.0) / 2)
    assert s.mean_norm_latency_s == pytest.approx((2.5 / 5 + 3.0 / 3) / 2)


def test_summary_of_nothing_finished():
    s = summarize([ServedRequest(0, 0.0, 4, 4, status="rejected")])
    assert (s.num_finished, s.num_failed, s.num_rejected, s.output_tok_s, s.mean_ttft_ms) == (0, 1, 1, 0.0, None)


def test_agreement_counts_positions_and_first_mismatch():
    ag = agreement([[1, 2, 3], [4, 5], [7]], [[1, 2, 3], [4, 6], [7, 8]])
    assert ag["num_identical"] == 1 and ag["first_mismatch"] == [None, 1, 1]
    assert ag["token_match_fraction"] == pytest.approx(5 / 7)


def test_saved_hf_folder_round_trips(tmp_path):
    model = random_model(TINY, seed=5)
    folder = save_hf_folder(model, tmp_path / "tiny", max_position_embeddings=512)
    config = json.loads((folder / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"] and config["max_position_embeddings"] == 512
    back = load_model(folder)
    assert back.config == model.config
    for name, tensor in model.w.items():
        assert torch.equal(back.w[name], tensor), name


def test_missing_vllm_is_one_line_with_install_hint(tmp_path, monkeypatch):
    monkeypatch.setenv("VLLM_PYTHON", sys.executable)  # this interpreter has no vllm
    if vllm_backend.find_spec("vllm") is not None:
        pytest.skip("this Python has vLLM")
    check_vllm.cache_clear()
    with pytest.raises(InputError, match="make setup-vllm") as err:
        check_vllm(sys.executable)
    assert "\n" not in str(err.value) and "No module named 'vllm'" in str(err.value)
    with pytest.raises(InputError, match="cannot run"):
        check_vllm(str(tmp_path / "no-python"))


def test_runner_failure_is_one_line(tmp_path):
    """A fake 'vLLM Python' whose runner dies: the error names the last error line, not a traceback."""
    fake = tmp_path / "python"
    fake.write_text(f"#!/bin/sh\nif [ \"$1\" = -c ]; then echo 0.0-fake; exit 0; fi\n"
                    f"echo 'Traceback (most recent call last):' >&2\necho 'RuntimeError: no KV room' >&2\nexit 1\n")
    fake.chmod(0o755)
    check_vllm.cache_clear()
    job = build_job(VllmSetup(blocks_per_engine=4, max_model_len=128), "/m", [requests_of([[1, 2]], [2])])
    with pytest.raises(InputError, match="vLLM failed: RuntimeError: no KV room"):
        run_job(job, python=str(fake))


def test_staged_runner_imports_only_its_dispatch(tmp_path):
    src = stage_runner(tmp_path)
    assert sorted(p.name for p in (src / "baselines").iterdir()) == ["__init__.py", "real_vllm"]
    package = src / "baselines" / "real_vllm"
    assert sorted(p.name for p in package.iterdir()) == ["__init__.py", "dispatch.py", "runner.py"]
    for name in ("runner.py", "dispatch.py"):
        text = (package / name).read_text()
        assert "reference_impl" not in text.split('"""', 2)[-1] and "import numpy" not in text


@pytest.mark.parametrize("argv", [["generate", "--backend", "vllm", "--prompt-len", "5"],
                                  ["compare-vllm", "--num-requests", "1"]])
def test_cli_without_vllm_says_how_to_install(argv, tmp_path, monkeypatch, capsys):
    from repro.cli import main

    if vllm_backend.find_spec("vllm") is not None:
        pytest.skip("this Python has vLLM")
    monkeypatch.setenv("VLLM_PYTHON", sys.executable)
    check_vllm.cache_clear()
    out = tmp_path / "cmp.json"
    with pytest.raises(SystemExit) as exit_info:
        main(argv + (["--out", str(out)] if argv[0] == "compare-vllm" else []))
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "Traceback" not in err
    assert err.count("\n") == 1 and err.startswith("error: vLLM does not import") and "make setup-vllm" in err
    assert not out.exists()


def test_serving_point_fits_the_serving_schema():
    from pathlib import Path

    import jsonschema

    schema_path = Path(__file__).resolve().parents[2] / "repro" / "schemas" / "serving.schema.json"
    if not schema_path.exists():
        pytest.skip("the serving experiments' schema has not landed")
    schema = json.loads(schema_path.read_text())
    served = [ServedRequest(0, 0.0, 8, 4, 0, "finished", 0.2, 1.0), ServedRequest(1, 0.5, 8, 4, 1, "unfinished")]
    point = serving_point("vllm-s", 1.5, summarize(served, [0.2, 0.4], [1, 1]), wall_s=2.0)
    jsonschema.validate(point, {**schema["$defs"]["point"], "$defs": schema["$defs"]})
    assert point["num_unfinished"] == 1 and point["window_tok_s"] == pytest.approx(2 / 0.5)


def test_serve_local_honours_arrivals_matches_generate_and_rejects_what_fits_nowhere():
    from baselines.real_vllm.compare import serve_local
    from reference_impl.backends.local import generate
    from reference_impl.control.engine import EngineConfig
    from reference_impl.model.llama import ModelConfig

    model = random_model(ModelConfig(vocab_size=64, hidden_size=64, intermediate_size=96, num_layers=2, num_heads=2,
                                     num_kv_heads=1), seed=1)
    prompts = [[1, 2, 3, 4, 5], [9, 8, 7], [5] * 40]
    config = EngineConfig(2, 4, block_size=4)  # a request may hold at most 8 blocks (32 tokens) with pooling
    run = serve_local(model, prompts, [6, 6, 6], config, arrivals_s=[0.0, 0.05, 0.05])
    assert [r.status for r in run.served] == ["finished", "finished", "rejected"]
    assert run.served[1].first_token_s >= 0.05 and run.served[1].engine in (0, 1)
    assert run.token_ids[:2] == generate(model, prompts[:2], 6, config, ignore_eos=True).token_ids
    assert sum(run.step_tokens) == 12 and run.step_end_s == sorted(run.step_end_s)
    s = summarize(run.served, run.step_end_s, run.step_tokens)
    assert (s.num_finished, s.num_rejected) == (2, 1)


def test_real_e2e_params_and_workloads():
    from baselines.real_vllm.e2e import QUICK, RealE2EConfig, config_from_params, trace_requests
    from repro.framework.base import RunParams

    assert config_from_params(RunParams(quick=True, seed=4)) == RealE2EConfig(**{**_fields(QUICK), "seed": 4})
    cfg = config_from_params(RunParams(extra={"rates": "1,3.5", "traces": "0,2", "num_requests": "5"}))
    assert (cfg.rates_per_s, cfg.trace_ids, cfg.num_requests) == ((1.0, 3.5), (0, 2), 5)
    for extra, match in (({"rates": "1,x"}, "not a valid"), ({"rates": "2"}, "two request rates"),
                         ({"color": "red"}, "unknown --param")):
        with pytest.raises(InputError, match=match):
            config_from_params(RunParams(extra=extra))
    slow, fast = (trace_requests(QUICK, 2, rate, 512) for rate in (1.0, 4.0))
    assert slow[0] == fast[0] and slow[1] == fast[1]  # same prompts and lengths at every rate
    assert max(len(p) for p in slow[0]) <= QUICK.max_prompt_len and max(slow[1]) <= QUICK.max_output_len
    assert slow[2][-1] > fast[2][-1]


def _fields(config) -> dict:
    from dataclasses import fields

    return {f.name: getattr(config, f.name) for f in fields(config)}


def test_e2e_on_vllm_without_vllm_is_one_line_and_writes_nothing(tmp_path, monkeypatch, capsys):
    from repro.cli import main

    if vllm_backend.find_spec("vllm") is not None:
        pytest.skip("this Python has vLLM")
    monkeypatch.setenv("VLLM_PYTHON", sys.executable)
    check_vllm.cache_clear()
    with pytest.raises(SystemExit) as exit_info:
        main(["run", "--experiment", "e2e", "--backend", "vllm", "--quick", "--results-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.startswith("error: vLLM does not import") and "Traceback" not in err
    assert not list(tmp_path.rglob("result.json"))
