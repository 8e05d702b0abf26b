"""Declared --param sets, run ids of non-default runs, the lazy command table and the progress helper."""
import dataclasses
import json
import importlib

import click
import pytest

from reference_impl.errors import InputError
from repro.framework.base import Experiment, RunParams, default_run_id
from repro.framework.params import Param, fingerprint, positive_int
from repro.framework.registry import EXPERIMENTS, get_experiment
from repro.results import resolve_params, run_and_save

@pytest.mark.parametrize("name", sorted(EXPERIMENTS))
def test_experiment_declares_its_params_once(name):
    exp = get_experiment(name)
    assert isinstance(exp.params, tuple) and all(isinstance(p, Param) for p in exp.params)
    for backend in exp.backends:  # a key may be declared once per backend (e2e's sim and ray sets)
        names = [p.name for p in exp.params if not p.backends or backend in p.backends]
        assert len(names) == len(set(names)), backend
    for p in exp.params:  # every declared default parses back to itself through its own type
        assert p.help and (p.default is None or p.type(str(p.default).lower() if isinstance(p.default, bool)
                                                        else str(p.default)) == p.default)


def _toy(params):
    return Experiment("toy", (), "none.json", lambda p, log: {}, default_run_id, params=params)


def test_an_experiment_that_declares_nothing_rejects_every_param():
    bare = Experiment("toy", (), "none.json", lambda p, log: {}, default_run_id)  # params left out
    for exp in (bare, _toy(())):
        for key in ("anything", "link", "seeds"):
            with pytest.raises(InputError, match="valid keys: none"):
                resolve_params(exp, RunParams(extra={key: "1"}))
        assert resolve_params(exp, RunParams()) == (RunParams(), {})


def test_only_non_default_values_change_the_run():
    exp = _toy((Param("n", positive_int, 3, "a count"), Param("m", positive_int, None, "chosen by --quick")))
    assert resolve_params(exp, RunParams(extra={"n": "3"}))[1] == {}  # the default, spelled out: same run
    assert resolve_params(exp, RunParams(extra={"n": "03"}))[1] == {}
    assert resolve_params(exp, RunParams(extra={"n": "4"}))[1] == {"n": 4}
    assert resolve_params(exp, RunParams(extra={"m": "3"}))[1] == {"m": 3}
    assert fingerprint({"n": 4}) == fingerprint({"n": 4}) != fingerprint({"n": 5})
    assert fingerprint({"a": 1, "b": (1, 2)}) == fingerprint({"b": [1, 2], "a": 1})


def test_non_default_run_gets_its_own_id(tmp_path, monkeypatch):
    exp = get_experiment("kv-move")
    fast = dataclasses.replace(exp, run=lambda p, log: {"unused": True}, schema="result.schema.json")
    import repro.results as results
    monkeypatch.setattr(results, "validate_result", lambda *a, **k: None)
    default, _ = run_and_save(fast, RunParams(), tmp_path, log=lambda m: None)
    other, ran = run_and_save(fast, RunParams(extra={"batch_size": "8"}), tmp_path, log=lambda m: None)
    assert ran and default.parent.name == "sim-full-seed0" and other.parent.name == "sim-full-seed0-p" + fingerprint(
        {"batch_size": 8})


def test_lazy_command_table_matches_the_commands():
    from repro.cli import COMMANDS
    from repro.commands.bench import BENCHMARKS
    for table in (COMMANDS, BENCHMARKS):
        for name, (target, short) in table.items():
            module, attr = target.split(":")
            command = getattr(importlib.import_module(module), attr)
            assert isinstance(command, click.Command) and command.get_short_help_str(1000) == short, name


def test_simulate_offers_every_design_of_the_catalog():
    from reference_impl.systems.catalog import DESIGNS, design
    from repro.commands.simulate import simulate
    choices = next(p.type.choices for p in simulate.params if p.name == "system")
    assert list(choices) == list(DESIGNS)
    assert all(design(name).name == name for name in DESIGNS)  # each name's module defines that design


def test_progress_log_prints_every_message_with_or_without_a_bar(monkeypatch, capsys):
    from repro.progress import progress_log
    for forced in ("0", "1"):
        monkeypatch.setenv("REPRO_PROGRESS", forced)
        with progress_log("toy") as log:
            log("first")
            log("second")
        out = capsys.readouterr().out
        assert out.splitlines() == ["first", "second"]


def test_every_registered_experiment_imports_and_lists_its_params():
    from repro.framework.params import describe_params
    for name in EXPERIMENTS:
        assert describe_params(get_experiment(name)).startswith(name)


def test_figures_show_the_default_run_not_a_later_non_default_one():
    from repro.framework.figures import main_result
    runs = [{"run_id": rid, "params": {"quick": quick, "overrides": over}}
            for rid, quick, over in (("sim-full-seed0", False, {}), ("sim-full-seed0-pab", False, {"link": "0.125"}),
                                     ("sim-quick-seed0", True, {}))]
    assert main_result(runs)["run_id"] == "sim-full-seed0"
    assert main_result(runs[1:])["run_id"] == "sim-full-seed0-pab"
    assert main_result(runs[2:])["run_id"] == "sim-quick-seed0"


def test_long_commands_show_progress_on_stderr_only(tmp_path, monkeypatch, capsys):
    from repro.cli import main
    monkeypatch.setenv("REPRO_PROGRESS", "1")
    main(["workloads", "generate", "--trace", "1", "--rate", "1", "--num-requests", "50", "--out",
          str(tmp_path / "w.jsonl")])
    out, err = capsys.readouterr()
    assert out.startswith("wrote 50 requests") and out.count("\n") == 1
    assert "generate:" in err and "write " in err  # the stage bar and the per-request bar


def _fake_point(task):
    return {"steady_output_tok_s": task.rate_per_s, "num_finished": 1, "num_requests": 1, "wall_s": 0.0}


def test_simulated_points_count_on_a_bar_on_stderr_and_log_on_stdout(monkeypatch, capsys):
    from repro.serving.sweep import run_tasks
    from repro.serving.tasks import PointTask
    from repro.progress import progress_log
    tasks = [PointTask("vllm-m", None, (), rate, "toy", runner=_fake_point) for rate in (1.0, 2.0, 3.0)]
    for forced in ("0", "1"):
        monkeypatch.setenv("REPRO_PROGRESS", forced)
        with progress_log("toy") as log:
            points = run_tasks(tasks, log)
        out, err = capsys.readouterr()
        assert [p["steady_output_tok_s"] for p in points] == [1.0, 2.0, 3.0]
        assert len(out.splitlines()) == 3 and all("toy vllm-m" in line for line in out.splitlines())
        assert ("simulated points" in err and "/3 " in err) == (forced == "1")  # a bar of 3 points


@pytest.mark.parametrize("argv, bar, rows", [
    (["bench", "engine", "--batches", "1,2", "--instances", "1,2", "--prompt-len", "4", "--decode-steps", "3",
      "--repeats", "2"], "bench engine", 4),
    (["bench", "attention", "--models", "llama2-70b", "--contexts", "64", "--batches", "1,2", "--backend", "torch"],
     "bench attention", 2),
])
def test_benchmarks_show_progress_on_stderr_and_their_table_on_stdout(argv, bar, rows, tmp_path, monkeypatch,
                                                                       capsys):
    from repro.cli import main
    out_path = tmp_path / "points.json"
    lines = []
    for forced in ("0", "1"):
        monkeypatch.setenv("REPRO_PROGRESS", forced)
        main([*argv, "--out", str(out_path)])
        out, err = capsys.readouterr()
        assert (bar in err) == (forced == "1") and "\r" not in out
        assert out.splitlines()[-1] == f"wrote {out_path}" and json.loads(out_path.read_text())["points"]
        lines.append(len(out.splitlines()))
    assert lines[0] == lines[1] >= rows + 3  # the same table with or without the bar
