import json
import socket
import time

import pytest

from repro.cli import main
from workloads.io import load_jsonl
from workloads.sources import hub


def run(argv, capsys):
    try:
        main(argv)
        code = 0
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def test_generate_writes_a_loadable_file(tmp_path, capsys):
    out = tmp_path / "t5.jsonl"
    code, stdout, _ = run(["workloads", "generate", "--trace", "5", "--num-requests", "50", "--rate", "2",
                           "--seed", "3", "--out", str(out)], capsys)
    assert code == 0 and "wrote 50 requests of trace 5" in stdout
    requests = load_jsonl(out)
    assert len(requests) == 50 and requests[0].source == "fitted:trace-5"
    code, _, _ = run(["workloads", "generate", "--dataset", "7", "--rate", "inf", "--out", str(out)], capsys)
    assert code == 0 and len(load_jsonl(out)) == 1000 and load_jsonl(out)[-1].arrival_s == 0.0


@pytest.mark.parametrize("args, message", [
    (["--trace", "9", "--rate", "1"], "unknown trace 9"),
    (["--dataset", "0", "--rate", "1"], "unknown dataset 0"),
    (["--dataset", "19", "--rate", "1"], "unknown dataset 19"),
    (["--trace", "1", "--rate", "0"], "--rate must be > 0"),
    (["--trace", "1", "--rate", "-3"], "--rate must be > 0"),
    (["--trace", "1", "--rate", "1", "--num-requests", "0"], "--num-requests"),
    (["--rate", "1"], "exactly one of --trace N or --dataset N"),
    (["--trace", "1", "--dataset", "2", "--rate", "1"], "exactly one of"),
    (["--trace", "1", "--rate", "1", "--burstiness", "0"], "burstiness"),
    (["--trace", "0", "--rate", "1", "--sharegpt-file", "/nonexistent/sharegpt.json"], "no such source file"),
])
def test_bad_input_is_one_line_and_leaves_no_file(tmp_path, capsys, args, message):
    out = tmp_path / "w.jsonl"
    code, stdout, err = run(["workloads", "generate", *args, "--out", str(out)], capsys)
    assert code != 0
    assert err.startswith("error: ") and message in err and err.count("\n") == 1 and "Traceback" not in err
    assert not out.exists()


def test_bad_input_keeps_an_existing_output(tmp_path, capsys):
    out = tmp_path / "w.jsonl"
    out.write_text("keep me\n")
    code, _, _ = run(["workloads", "generate", "--trace", "42", "--rate", "1", "--out", str(out)], capsys)
    assert code == 2 and out.read_text() == "keep me\n"


def test_list_names_every_trace_and_dataset(capsys):
    code, out, _ = run(["workloads", "list", "--source", "fitted"], capsys)
    assert code == 0
    lines = out.splitlines()
    assert sum(line.lstrip().split(" ")[0].isdigit() for line in lines) == 9 + 18
    assert "L-Eval" in out and "fitted Beta" in out and "LLaMA2-70B" in out


def test_stats_json_is_within_tolerance(capsys):
    code, out, _ = run(["workloads", "stats", "--json", "--source", "fitted", "--num-requests", "5000"], capsys)
    assert code == 0
    report = json.loads(out)
    assert [r["trace_id"] for r in report["traces"]] == list(range(9))
    assert all(r["is_within_tolerance"] for r in report["traces"])
    assert all(r["is_within_ranges"] and abs(r["measured_long_ratio"] - r["long_ratio"]) <= 0.02
               for r in report["datasets"])


def test_stats_rejects_zero_requests(capsys):
    code, _, err = run(["workloads", "stats", "--num-requests", "0"], capsys)
    assert code == 2 and err.startswith("error: ") and "--num-requests" in err and err.count("\n") == 1


def test_stats_table(capsys):
    code, out, _ = run(["workloads", "stats", "--source", "fitted", "--num-requests", "2000"], capsys)
    assert code == 0 and "paper avg" in out and out.count(" yes ") >= 9


def test_hub_guard_is_fast_when_offline_or_unreachable(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    hub.hub_reachable.cache_clear()
    assert hub.hub_reachable() is False
    hub.hub_reachable.cache_clear()
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        assert hub.endpoint_reachable(f"http://127.0.0.1:{server.getsockname()[1]}")
        port = server.getsockname()[1]
    start = time.perf_counter()
    assert not hub.endpoint_reachable(f"http://127.0.0.1:{port}")  # closed now
    assert not hub.endpoint_reachable("http://name.invalid:443")
    assert time.perf_counter() - start < 3.0


def test_check_summarises_a_file_and_rejects_bad_ones(tmp_path, capsys):
    path = tmp_path / "w.jsonl"
    assert run(["workloads", "generate", "--trace", "2", "--num-requests", "30", "--rate", "3", "--out", str(path)],
               capsys)[0] == 0
    code, out, _ = run(["workloads", "check", str(path)], capsys)
    assert code == 0 and "30 requests" in out
    path.write_text(path.read_text()[:-10])
    code, _, err = run(["workloads", "check", str(path)], capsys)
    assert code == 2 and "truncated" in err and err.count("\n") == 1
    code, _, err = run(["workloads", "check", str(tmp_path / "missing.jsonl")], capsys)
    assert code == 2 and "no such workload file" in err
