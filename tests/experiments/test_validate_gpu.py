"""`repro validate-gpu`: the CPU dry run of every part (so the GPU command cannot rot), a part's time-out or
failure recorded while the rest still run, and the one-line refusals."""
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import jsonschema
import pytest

from repro.cli import main
from repro.validate_gpu.runner import run_all
from repro.validate_gpu.sizes import DRY, PARTS

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((ROOT / "repro/validate_gpu/schema.json").read_text())


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("vg") / "run"
    proc = subprocess.run([sys.executable, "-m", "repro", "validate-gpu", "--dry-run", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    return proc, out


def test_dry_run_passes_every_part(dry_run):
    proc, out = dry_run
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads((out / "result.json").read_text())
    jsonschema.validate(doc, SCHEMA)
    assert doc["mode"] == "dry-run" and doc["passed"]
    assert list(doc["parts"]) == list(PARTS)
    assert all(p["status"] == "ok" and p["wall_s"] <= p["budget_s"] for p in doc["parts"].values())
    assert proc.stdout == (out / "summary.md").read_text()  # stdout: the summary only; progress on stderr
    assert (out / "figure.png").stat().st_size > 10_000


def test_dry_run_checks_what_it_claims(dry_run):
    _, out = dry_run
    parts = {k: v["result"] for k, v in json.loads((out / "result.json").read_text())["parts"].items()}
    assert all(r["ok"] for r in parts["attention"]["exactness"])
    assert {r["backend"] for r in parts["attention"]["exactness"]} == {"triton", "torch"}
    engine = parts["engine"]
    assert all(engine["one_instance_equal"]) and all(engine["spilled_equal"])
    assert engine["spilled"]["max_remote_fraction"] > 0 and engine["spilled"]["most_instances_one_request"] >= 2
    steps = parts["steps"]["points"]
    assert {p["kind"] for p in steps} == {"decode", "prefill"}
    assert all(p["measured_s"] > 0 and p["predicted_s"] > 0 for p in steps)
    decode = [p for p in steps if p["kind"] == "decode"]
    # the cost model predicts more time for more KV at one batch; attention is part of the step
    by_batch = {}
    for p in decode:
        by_batch.setdefault(p["batch"], []).append(p)
    for rows in by_batch.values():
        rows.sort(key=lambda p: p["context"])
        assert rows[-1]["predicted_s"] > rows[0]["predicted_s"]
    assert all(0 < p["attention_s"] < p["eager_s"] for p in decode)  # both eager (measured_s: from graphs)
    packed = parts["steps"]["packed_prefill"]  # every switched-off path ran beside the default one
    assert [p["prompt_lens"] for p in packed] == [list(lens) for lens in DRY.steps.packed_prefills]
    assert all(p[k] > 0 for p in packed for k in ("packed_s", "per_prompt_s", "unfused_s"))
    silu = parts["steps"]["silu_mul_decode"]
    assert (silu["batch"], silu["context"]) == DRY.steps.silu_mul_decode and silu["fused_s"] > 0 < silu["unfused_s"]
    pooling = parts["pooling"]
    assert all(all(r["equal"]) and r["max_remote_fraction"] > 0 for r in pooling["runs"])
    serving = parts["serving"]
    assert serving["rates_per_s"] == sorted(serving["rates_per_s"]) and len(serving["points"]) >= 2
    for p in serving["points"]:
        for arm in ("committed", "on_the_spot"):
            assert p[arm]["num_requests"] == p["measured"]["num_requests"]
            err = p[f"{arm}_error"]["output_tok_s"]
            assert err == pytest.approx(p[arm]["output_tok_s"] / p["measured"]["output_tok_s"] - 1)


def test_a_part_out_of_time_is_recorded_and_the_rest_run(tmp_path):
    sizes = replace(DRY, budgets_s={**DRY.budgets_s, "steps": 0.5})
    doc = run_all(tmp_path, sizes, "cpu", parts=("steps", "pooling"), echo=lambda line: None)
    assert doc["parts"]["steps"]["status"] == "timeout" and "result" not in doc["parts"]["steps"]
    assert doc["parts"]["pooling"]["status"] == "ok"
    assert not doc["passed"]
    jsonschema.validate(json.loads((tmp_path / "result.json").read_text()), SCHEMA)
    assert "## steps: timeout" in (tmp_path / "summary.md").read_text()


def test_missing_package_is_one_line(monkeypatch, capsys, tmp_path):
    from repro.validate_gpu import runner

    monkeypatch.setitem(runner.NEEDED, "no_such_module_xyz", "no-such-package")
    with pytest.raises(SystemExit) as exit_info:
        main(["validate-gpu", "--dry-run", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1 and "no-such-package" in err
    assert not (tmp_path / "out").exists()


def test_refuses_a_used_folder_and_a_missing_gpu(capsys, tmp_path):
    (tmp_path / "old.txt").write_text("x")
    with pytest.raises(SystemExit) as exit_info:
        main(["validate-gpu", "--dry-run", "--out", str(tmp_path)])
    assert exit_info.value.code == 2 and "not an empty folder" in capsys.readouterr().err
    import torch

    if not torch.cuda.is_available():
        with pytest.raises(SystemExit) as exit_info:
            main(["validate-gpu", "--out", str(tmp_path / "new")])
        err = capsys.readouterr().err
        assert exit_info.value.code == 2 and "--dry-run" in err and err.count("\n") == 1
