"""`repro attention check` and `repro bench attention`, run as a user would (small sizes)."""
import json
import subprocess
import sys

import pytest


def repro(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "repro", *args], capture_output=True, text=True, timeout=timeout)


def test_check_prints_every_backend_dtype_and_layout():
    res = repro("attention", "check", "--lengths", "1,17,40", "--head-dim", "64", "--json")
    assert res.returncode == 0, res.stderr
    rows = json.loads(res.stdout)["rows"]
    assert {(r["backend"], r["dtype"], r["layout"]) for r in rows} == {
        (b, d, l) for b in ("torch", "triton") for d in ("float32", "float16", "bfloat16")
        for l in ("MHA", "GQA", "MQA")}
    assert all(r["ok"] and r["max_out_err"] <= r["bound"] for r in rows)


def test_bench_writes_points_with_gb_s_and_sdpa_ratio(tmp_path):
    out = tmp_path / "bench.json"
    res = repro("bench", "attention", "--models", "llama2-70b", "--contexts", "64,100", "--batches", "1,3",
                "--max-kv-gib", "0.0008", "--out", str(out))
    assert res.returncode == 0, res.stderr
    result = json.loads(out.read_text())
    assert result["peak_gb_s"] > 0
    ran = [p for p in result["points"] if p["skipped"] is None]
    skipped = [p for p in result["points"] if p["skipped"]]
    assert len(ran) == 3 and len(skipped) == 1  # 100 tokens x 3 seqs is over the 0.0008 GiB cap
    for p in ran:
        assert p["kv_bytes"] == 2 * p["batch"] * p["context_tokens"] * 8 * 128 * 2
        assert p["achieved_gb_s"] == pytest.approx(p["kv_bytes"] / (p["time_ms"] / 1e3) / 1e9)
        assert p["speedup_vs_sdpa"] == pytest.approx(p["sdpa_time_ms"] / p["time_ms"])
        assert p["max_abs_diff_vs_sdpa"] < 0.05  # bf16 outputs of two exact methods


@pytest.mark.parametrize("args,message", [
    (("attention", "check", "--lengths", "1,x"), "comma-separated integers"),
    (("attention", "check", "--lengths", "-3"), "integers >= 0"),
    (("bench", "attention", "--models", "gpt-5"), "unknown model"),
    (("bench", "attention", "--batches", "0"), "integers >= 1"),
    (("attention", "nonsense"), "No such command"),
])
def test_bad_cli_input_is_one_line_and_nonzero(args, message, tmp_path):
    res = repro(*args, "--out", str(tmp_path / "x.json")) if args[0] == "bench" else repro(*args)
    assert res.returncode != 0
    assert message in res.stderr
    assert "Traceback" not in res.stderr
    assert not (tmp_path / "x.json").exists()
