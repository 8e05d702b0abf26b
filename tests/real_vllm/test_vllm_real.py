"""`make test-vllm`: the adapter end to end on real vLLM (CPU build in .venv-vllm), deselected from `make test`.

Three vLLM runs (each starts engines, ~1 min on 2 cores): compare-vllm through the CLI, vLLM-M with two
engines, arrivals and a request too big for one engine, and vLLM-S as one tensor-parallel engine."""
import json

import pytest

from baselines.real_vllm.backend import random_prompts, run_vllm, vllm_python
from baselines.real_vllm.config import VllmSetup
from baselines.real_vllm.model import resolve_for_vllm, save_hf_folder
from reference_impl.backends.local import generate
from reference_impl.control.engine import EngineConfig
from repro.cli import main

pytestmark = pytest.mark.vllm


@pytest.fixture(scope="module", autouse=True)
def have_vllm():
    from baselines.real_vllm.backend import check_vllm

    check_vllm(vllm_python())  # an InputError here says how to install it


def test_compare_vllm_tokens_agree_and_result_is_written(tmp_path, capsys):
    out = tmp_path / "cmp" / "result.json"
    main(["compare-vllm", "--num-requests", "4", "--max-prompt-len", "64", "--max-output-len", "16",
          "--out", str(out), "--log", str(tmp_path / "vllm.log")])
    printed = capsys.readouterr().out
    result = json.loads(out.read_text())
    ag = result["agreement"]
    assert ag["num_identical"] == ag["num_requests"] == 4, ag
    for system in ("local", "vllm"):
        s = result[system]["summary"]
        assert s["num_finished"] == 4 and s["num_failed"] == 0 and s["output_tok_s"] > 0
    assert result["vllm"]["summary"]["num_requests"] == 4 and result["throughput_ratio"] > 0
    assert result["vllm_version"] in printed and "4/4 requests identical" in printed


def test_vllm_m_two_engines_dispatch_arrivals_and_rejection(tmp_path):
    model = resolve_for_vllm("tiny", seed=3)
    folder = save_hf_folder(model, tmp_path / "tiny")
    import numpy as np

    prompts = random_prompts([40, 70, 33, 90, 200], model.config.vocab_size, np.random.default_rng(3))
    max_tokens = [8, 8, 8, 8, 8]
    arrivals_s = [0.0, 0.0, 0.3, 0.3, 0.3]
    setup = VllmSetup("vllm-m", num_devices=2, blocks_per_engine=6, max_model_len=192)
    run = run_vllm(setup, folder, prompts, max_tokens, arrivals_s, log_path=str(tmp_path / "vllm.log"))
    status = [r.status for r in run.served]
    assert status == ["finished"] * 4 + ["rejected"]  # 208 tokens: above max_model_len 192 and 6 blocks of 32
    assert {r.engine for r in run.served[:4]} == {0, 1}
    assert all(r.first_token_s >= r.arrival_s for r in run.served[:4])
    local = generate(model, prompts[:4], 8, EngineConfig(1, 32, block_size=32), ignore_eos=True).token_ids
    assert run.token_ids[:4] == local


def test_vllm_s_tensor_parallel_engine_matches_local(tmp_path):
    model = resolve_for_vllm("tiny", seed=5)
    folder = save_hf_folder(model, tmp_path / "tiny")
    import numpy as np

    prompts = random_prompts([20, 33], model.config.vocab_size, np.random.default_rng(5))
    run = run_vllm(VllmSetup("vllm-s", num_devices=2, blocks_per_engine=16, max_model_len=128), folder, prompts,
                   [8, 8], log_path=str(tmp_path / "vllm.log"))  # one engine, tensor parallel 2 (one core per rank)
    assert [r.status for r in run.served] == ["finished"] * 2
    assert run.token_ids == generate(model, prompts, 8, EngineConfig(1, 16, block_size=32), ignore_eos=True).token_ids
