"""`vllm bench serve --backend openai` (a client no one here wrote) against our server: every request succeeds,
what it counts as generated is what the server's own counter says, and its printed metrics stand beside
`repro bench serve`'s of the same server. The vllm tier: needs .venv-vllm (`make setup-vllm`)."""
import json
import os
import re
import subprocess
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"
pytestmark = [pytest.mark.vllm,
              pytest.mark.skipif(not VLLM_PYTHON.exists(), reason="needs .venv-vllm (make setup-vllm)")]


def _generated(server) -> float:
    text = httpx.get(server.base_url + "/metrics").text
    return next(float(line.split()[-1]) for line in text.splitlines()
                if line.startswith("vllm:generation_tokens_total{"))


def test_vllm_bench_serve_against_our_server(start_server, tiny_dir, repro_cli, tmp_path):
    server = start_server()
    before = _generated(server)
    env = dict(os.environ, VLLM_TARGET_DEVICE="cpu")
    run = subprocess.run([str(VLLM_PYTHON), str(ROOT / "tests" / "server" / "vllm_cli.py"), "bench", "serve",
                          "--backend", "openai", "--base-url", server.base_url, "--model", "tiny",
                          "--tokenizer", str(tiny_dir), "--dataset-name", "random", "--random-input-len", "64",
                          "--random-output-len", "16", "--num-prompts", "24", "--request-rate", "8", "--ignore-eos",
                          "--seed", "0", "--percentile-metrics", "ttft,tpot,itl,e2el", "--save-result",
                          "--result-dir", str(tmp_path), "--result-filename", "vllm.json"],
                         env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    printed = dict(re.findall(r"^([A-Za-z][\w /()]+?):\s+([\d.]+)\s*$", run.stdout, re.M))
    assert printed["Successful requests"] == "24" and printed["Failed requests"] == "0"
    saved = json.loads((tmp_path / "vllm.json").read_text())
    assert saved["total_output_tokens"] == 24 * 16 == _generated(server) - before
    code, out, err = repro_cli(["bench", "serve", "--base-url", server.base_url, "--requests", "24", "--rates", "8",
                                "--out", str(tmp_path / "ours.json")])
    assert code == 0, err
    ours = json.loads((tmp_path / "ours.json").read_text())["reports"][0]
    print(f"vllm bench serve: mean TTFT {printed['Mean TTFT (ms)']} ms, mean TPOT {printed['Mean TPOT (ms)']} ms; "
          f"repro bench serve (trace 1): p50 TTFT {ours['ttft_ms']['p50']:.1f} ms, "
          f"p50 TPOT {ours['tpot_ms']['p50']:.1f} ms")
    assert ours["num_errors"] == 0 and float(printed["Mean TTFT (ms)"]) > 0
