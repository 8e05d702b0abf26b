import json
import socket
import time

import pytest

from workloads.io import load_jsonl
from workloads.sources import hub


def test_generate_writes_a_loadable_file(tmp_path, repro_cli):
    out = tmp_path / "t5.jsonl"
    code, stdout, _ = repro_cli(["workloads", "generate", "--trace", "5", "--num-requests", "50", "--rate", "2",
                                 "--seed", "3", "--out", str(out)])
    assert code == 0 and "wrote 50 requests of trace 5" in stdout
    requests = load_jsonl(out)
    assert len(requests) == 50 and requests[0].source == "fitted:trace-5"
    code, _, _ = repro_cli(["workloads", "generate", "--dataset", "7", "--rate", "inf", "--out", str(out)])
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
def test_bad_input_is_one_line_and_leaves_no_file(tmp_path, repro_cli, args, message):
    out = tmp_path / "w.jsonl"
    code, stdout, err = repro_cli(["workloads", "generate", *args, "--out", str(out)])
    assert code != 0
    assert err.startswith("error: ") and message in err and err.count("\n") == 1 and "Traceback" not in err
    assert not out.exists()


def test_bad_input_keeps_an_existing_output(tmp_path, repro_cli):
    out = tmp_path / "w.jsonl"
    out.write_text("keep me\n")
    code, _, _ = repro_cli(["workloads", "generate", "--trace", "42", "--rate", "1", "--out", str(out)])
    assert code == 2 and out.read_text() == "keep me\n"


def test_list_names_every_trace_and_dataset(repro_cli):
    code, out, _ = repro_cli(["workloads", "list", "--source", "fitted"])
    assert code == 0
    lines = out.splitlines()
    assert sum(line.lstrip().split(" ")[0].isdigit() for line in lines) == 9 + 18
    assert "L-Eval" in out and "fitted Beta" in out and "LLaMA2-70B" in out


def test_stats_json_is_within_tolerance(repro_cli):
    code, out, _ = repro_cli(["workloads", "stats", "--json", "--source", "fitted", "--num-requests", "5000"])
    assert code == 0
    report = json.loads(out)
    assert [r["trace_id"] for r in report["traces"]] == list(range(9))
    assert all(r["is_within_tolerance"] for r in report["traces"])
    assert all(r["is_within_ranges"] and abs(r["measured_long_ratio"] - r["long_ratio"]) <= 0.02
               for r in report["datasets"])


def test_stats_rejects_zero_requests(repro_cli):
    code, _, err = repro_cli(["workloads", "stats", "--num-requests", "0"])
    assert code == 2 and err.startswith("error: ") and "--num-requests" in err and err.count("\n") == 1


def test_stats_table(repro_cli):
    code, out, _ = repro_cli(["workloads", "stats", "--source", "fitted", "--num-requests", "2000"])
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


def test_check_summarises_a_file_and_rejects_bad_ones(tmp_path, repro_cli):
    path = tmp_path / "w.jsonl"
    assert repro_cli(["workloads", "generate", "--trace", "2", "--num-requests", "30", "--rate", "3", "--out",
                      str(path)])[0] == 0
    code, out, _ = repro_cli(["workloads", "check", str(path)])
    assert code == 0 and "30 requests" in out
    path.write_text(path.read_text()[:-10])
    code, _, err = repro_cli(["workloads", "check", str(path)])
    assert code == 2 and "truncated" in err and err.count("\n") == 1
    code, _, err = repro_cli(["workloads", "check", str(tmp_path / "missing.jsonl")])
    assert code == 2 and "no such workload file" in err
