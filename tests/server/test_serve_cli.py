"""`repro serve --model tiny --port PORT` starts with no other flag on a fresh cache (the tiny folder is built on
first use) and answers; a bad --model is one line and exit status 2."""
import os
import socket
import subprocess
import sys
import time

import httpx
import pytest


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_serve_starts_with_model_and_port_only(tmp_path):
    port = _free_port()
    env = dict(os.environ, REPRO_CACHE_DIR=str(tmp_path / "cache"), PYTHONPATH=os.getcwd())
    proc = subprocess.Popen([sys.executable, "-m", "repro", "serve", "--model", "tiny", "--port", str(port)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, proc.stdout.read()
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "the server did not come up in 60 s"
            time.sleep(0.2)
        r = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", timeout=30,
                       json={"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3})
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] >= 1
        assert (tmp_path / "cache" / "tiny-chat-v1" / "tokenizer.json").is_file()
    finally:
        proc.terminate()
        proc.wait(20)


def test_serve_bad_model_is_one_line(repro_cli, tmp_path):
    code, out, err = repro_cli(["serve", "--model", str(tmp_path / "nope"), "--port", "1"])
    assert code == 2 and "no such folder" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("args, says", [(["--system", "pd-disaggregation"], "served with --backend ray"),
                                        (["--system", "vllm-m", "--no-pooling"], "--no-pooling")])
def test_serve_a_system_where_it_does_not_run_is_one_line(repro_cli, args, says):
    code, out, err = repro_cli(["serve", "--model", "tiny", "--port", "1", *args])
    assert code == 2 and says in err and len(err.strip().splitlines()) == 1, err
