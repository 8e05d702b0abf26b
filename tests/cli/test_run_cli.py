"""`repro run`: the log and the bar on stderr, the result's table (or --json) on stdout, and the point store under
--results-dir unless one is named (`repro figures` too)."""
import json

import pytest


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("REPRO_POINT_STORE", raising=False)
    return tmp_path


@pytest.mark.parametrize("bar", ["0", "1"])
def test_stdout_is_the_table_and_the_store_follows_results_dir(repro_cli, in_tmp, monkeypatch, bar):
    monkeypatch.setenv("REPRO_PROGRESS", bar)
    code, out, err = repro_cli(["run", "--experiment", "perf-model", "--quick", "--results-dir", "elsewhere"])
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == f"wrote: {in_tmp / 'elsewhere' / 'perf-model' / 'sim-quick-seed0' / 'result.json'}" or \
        lines[0] == "wrote: elsewhere/perf-model/sim-quick-seed0/result.json"
    assert lines[1].split() == ["claim", "metric", "paper", "reproduced", "verdict"]
    assert any(line.startswith("perf-model-2inst") for line in lines)
    assert "points on" in err and "points on" not in out  # the run's log is on stderr
    assert any((in_tmp / "elsewhere" / ".points").iterdir()) and not (in_tmp / "results").exists()


def test_the_figures_store_follows_results_dir(repro_cli, in_tmp, monkeypatch):
    monkeypatch.setattr("repro.framework.figure_set.FIGURE_SET", (("perf-model", "sim"),))  # one cheap member
    code, _, err = repro_cli(["figures", "--quick", "--results-dir", "elsewhere", "--figures-dir", "figs"])
    assert code == 0, err
    assert any((in_tmp / "elsewhere" / ".points").iterdir()) and not (in_tmp / "results").exists()
    assert any((in_tmp / "elsewhere" / "perf-model").iterdir())


def test_json_rows_and_a_result_already_there(repro_cli, in_tmp):
    argv = ["run", "--experiment", "perf-model", "--quick", "--results-dir", "r", "--param", "store=off"]
    first = json.loads(repro_cli([*argv, "--json"])[1])
    assert first["ran"] and first["result"].endswith("result.json") and not (in_tmp / "r" / ".points").exists()
    (row,) = [r for r in first["rows"] if r["claim_id"] == "perf-model-2inst"]
    assert row["reproduced"] > 1 and row["verdict"]
    code, out, _ = repro_cli([*argv, "--json"])
    again = json.loads(out)
    assert code == 0 and not again["ran"] and again["rows"] == first["rows"]
