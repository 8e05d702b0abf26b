"""`make test-vllm`: sim-vs-real's vLLM arm end to end, a tiny run (one vLLM job: start, step grid, serving)."""
import json

import pytest

from repro.framework.base import RunParams
from repro.framework.registry import get_experiment
from repro.results import run_and_save

pytestmark = pytest.mark.vllm


def test_the_vllm_arm_measures_and_predicts_every_rate(tmp_path):
    params = RunParams(quick=True, extra={"num_requests": "5", "max_tokens": "48", "rates": "3,30",
                                          "max_batch_size": "4"})
    path, ran = run_and_save(get_experiment("sim-vs-real"), params, tmp_path, log=lambda _: None)
    assert ran and path.parent.name.startswith("local-vllm-quick-seed0-p")
    data = json.loads(path.read_text())["data"]
    assert data["vllm"].startswith("ran: vLLM") and data["vllm_arm"]["clock"] == "wall"
    assert data["vllm_arm"]["omp_threads_bind"] == "0"  # one thread, pinned to core 0
    runs = [r for r in data["runs"] if r["system"] == "vllm-m"]
    assert [r["rate_per_s"] for r in runs] == [3.0, 30.0]
    for run in runs:
        for side in ("measured", "predicted"):
            assert run[side]["num_finished"] == run[side]["num_requests"] == 5
            assert run[side]["output_tok_s"] > 0 and run[side]["mean_ttft_s"] > 0 and run[side]["mean_tpot_s"] > 0
    (calibration,) = [c for c in data["calibrations"] if c["system"] == "vllm-m"]
    assert calibration["num_decode_steps"] > 0 and calibration["num_prefill_steps"] > 0
    assert calibration["kv_read_bytes_per_s"] > 0
    assert {p["system"] for p in data["points"]} == {"infinite-llm", "vllm-m"}
    assert set(data["errors"]) == {"infinite-llm", "vllm-m"}
    predicted = [r["predicted"]["output_tok_s"] for r in runs]
    assert predicted[1] >= predicted[0]  # more offered load: no less throughput from the deterministic simulator
