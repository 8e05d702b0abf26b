"""Bad input through the real CLI, class by class: a non-zero exit, one line on stderr, no traceback, no file left.

Each case runs `repro.cli.main` in this process (the console entry point); `--help` speed is checked in a fresh
interpreter by what it imports.
"""
import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from repro.cli import main

GOOD = {"req_id": 0, "arrival_s": 0.0, "prompt_len": 10, "output_len": 2, "source": "test"}
LLAMA = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 64, "hidden_size": 32,
         "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2}


@pytest.fixture(autouse=True)
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("REPRO_PROGRESS", raising=False)
    (tmp_path / "afile").write_text("not a folder\n")
    return tmp_path


def files_under(folder: Path) -> set[Path]:
    return {p for p in folder.rglob("*") if p.is_file()}


def fails(argv, capsys, expected: str, folder: Path) -> str:
    """Run `repro ARGV`; assert the one-line failure and that no file appeared under `folder`."""
    before = files_under(folder)
    with pytest.raises(SystemExit) as exit_info:
        main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert exit_info.value.code not in (0, None), out
    if argv[0] == "run":  # the run's log (stderr) may come before the error its work found
        err = err[err.find("error: "):] if "error: " in err else err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    assert expected in err, err
    assert files_under(folder) == before
    return err


def workload(folder: Path, lines: list) -> Path:
    path = folder / "w.jsonl"
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return path


@pytest.mark.parametrize("lines, expected", [
    ([GOOD, {**GOOD, "prompt_len": 7}], "req_id 0 repeats line 1"),
    ([], "empty workload file"),
    ([{**GOOD, "prompt_len": 10.5}], "prompt_len must be an integer"),
    ([{**GOOD, "prompt_len": "12"}], "prompt_len must be an integer"),
    ([{**GOOD, "output_len": 1e23}], "output_len must be an integer"),
    ([{**GOOD, "prompt_len": 10**23}], "prompt_len 1.000e23 is out of range"),
    ([{**GOOD, "arrival_s": -1}], "arrival_s must be"),
    ([{**GOOD, "arrival_s": 1e308}], "arrival_s must be a number of seconds from 0 to 1e+09"),
    ([{k: v for k, v in GOOD.items() if k != "output_len"}], "missing field(s) output_len"),
    (['{"req_id": 0, "arr'], ":1: not valid JSON"),
])
@pytest.mark.parametrize("command", [["workloads", "check"], ["simulate", "--workload"]])
def test_bad_workload_file(in_tmp, capsys, command, lines, expected):
    path = workload(in_tmp, lines)
    if not lines:
        path.write_text("")
    fails([*command, path], capsys, expected, in_tmp)


@pytest.mark.parametrize("config, expected", [
    ([1, 2], "must hold a JSON object, got a list"),
    ({"model_type": "llama", "architectures": ["LlamaForCausalLM"]}, "lacks 'vocab_size'"),
    ({**LLAMA, "num_attention_heads": "4"}, 'num_attention_heads must be an integer > 0, got "4"'),
    ({**LLAMA, "num_attention_heads": 0}, "num_attention_heads must be an integer > 0, got 0"),
    ({**LLAMA, "num_key_value_heads": 0}, "num_key_value_heads must be an integer > 0"),
    ({**LLAMA, "rms_norm_eps": "x"}, "rms_norm_eps must be a number > 0"),
    ({**LLAMA, "num_key_value_heads": 3}, "unsupported head layout"),
])
def test_bad_model_config(in_tmp, capsys, config, expected):
    (in_tmp / "model").mkdir()
    (in_tmp / "model" / "config.json").write_text(json.dumps(config))
    fails(["generate", "--model", in_tmp / "model", "--prompt-len", "4"], capsys, expected, in_tmp)


@pytest.mark.parametrize("argv, expected", [
    (["--experiment", "kv-move", "--param", "batch_size=abc"], "--param batch_size='abc' is not valid (expected integer"),
    (["--experiment", "attention-micro", "--backend", "local", "--param", "iters=abc"], "--param iters='abc'"),
    (["--experiment", "kv-move", "--param", "bacth_size=3"], "valid keys: batch_size, context_len"),
    (["--experiment", "motivation", "--param", "link=intra-node"], "valid keys: none"),
    (["--experiment", "lamina", "--param", "x=1"], "unknown --param 'x' for experiment lamina on backend sim; valid keys: ahead, graph, serving, store, workers"),
    (["--experiment", "context-length", "--param", "link=fast"], "unknown link 'fast' (expected intra-node|inter-node|GB/s > 0)"),
    (["--experiment", "dgfm", "--param", "seeds=0"], "--param seeds='0' is not valid"),
    (["--experiment", "migration", "--param", "align=maybe"], "expected true|false"),
    (["--experiment", "perf-model", "--quick", "--param", "long_len=1000000000"], "does not fit the debtor"),
    (["--experiment", "migration", "--quick", "--param", "trigger_fraction=2"], "trigger_fraction must be in (0, 1]"),
    (["--experiment", "migration", "--quick", "--param", "model=nope"], "unknown model 'nope'"),
    (["--experiment", "kv-move", "--param", "batch_size"], "expected KEY=VALUE"),
    (["--experiment", "kv-move", "--param", "batch_size=1", "--param", "batch_size=2"], "given twice"),
    (["--experiment", "kv-move", "--run-id", "../x"], "--run-id '../x'"),
    (["--experiment", "kv-move", "--seed", "-1"], "--seed"),
    (["--experiment", "kv-move", "--address", "auto"], "only with --backend ray"),
    (["--experiment", "nope"], "'nope' is not one of"),
    ([], "give --experiment NAME"),
])
def test_bad_run_options(in_tmp, capsys, argv, expected):
    fails(["run", *argv, "--results-dir", in_tmp / "results"], capsys, expected, in_tmp)


def _never_run(monkeypatch, module: str):
    """The experiment's work fails the test: the checks must come before it."""
    import importlib
    mod = importlib.import_module(module)

    def boom(params, log):
        raise AssertionError("the experiment ran before its output was checked")
    monkeypatch.setattr(mod, "EXPERIMENT", dataclasses.replace(mod.EXPERIMENT, run=boom))


@pytest.mark.parametrize("results_dir, expected", [
    ("/proc/repro-results", "cannot write in /proc"),
    ("afile", "afile is a file, not a folder"),
    ("res", "res/kv-move is a file, not a folder"),
])
def test_unwritable_results_dir_fails_before_the_run(in_tmp, capsys, monkeypatch, results_dir, expected):
    _never_run(monkeypatch, "repro.experiments.kv_move")
    (in_tmp / "res").mkdir()
    (in_tmp / "res" / "kv-move").write_text("")
    fails(["run", "--experiment", "kv-move", "--results-dir", results_dir], capsys, expected, in_tmp)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_read_only_results_dir_fails_before_the_run(in_tmp, capsys, monkeypatch):
    _never_run(monkeypatch, "repro.experiments.kv_move")
    (in_tmp / "ro").mkdir(mode=0o555)
    fails(["run", "--experiment", "kv-move", "--results-dir", in_tmp / "ro"], capsys, "Permission denied", in_tmp)


@pytest.mark.parametrize("out, expected", [
    ("/proc/x/out.json", "cannot write in /proc"),
    ("afile/out.json", "afile is a file, not a folder"),
    (".", "is a folder"),
])
@pytest.mark.parametrize("command", [
    ["simulate", "--workload", "w.jsonl", "--out"],
    ["workloads", "generate", "--trace", "1", "--rate", "1", "--num-requests", "5", "--out"],
    ["bench", "attention", "--contexts", "64", "--batches", "1", "--out"],
    ["bench", "engine", "--batches", "1", "--out"],
    ["bench", "ray", "--instances", "1", "--out"],
    ["profile", "--quick", "--out"],
    ["calibrate", "--profiles", ".", "--out"],
    ["compare-vllm", "--out"],
])
def test_unwritable_out_fails_before_the_work(in_tmp, capsys, command, out, expected):
    workload(in_tmp, [GOOD])
    err = fails([*command, out], capsys, "", in_tmp)
    assert expected in err or (out == "." and "is a directory" in err), err


def test_the_scale_latency_check_needs_a_scale_record(in_tmp, capsys):
    (in_tmp / "other.json").write_text(json.dumps({"points": []}))
    fails(["bench", "scale", "--latency", "other.json"], capsys, "not a `repro bench scale` record", in_tmp)
    fails(["bench", "scale", "--latency", "afile"], capsys, "not a `repro bench scale` record", in_tmp)


def test_report_and_plot_need_an_existing_results_dir(in_tmp, capsys):
    fails(["report", "--results-dir", "missing"], capsys, "'missing' does not exist", in_tmp)
    fails(["plot", "--results-dir", "missing"], capsys, "'missing' does not exist", in_tmp)
    (in_tmp / "results").mkdir()
    fails(["report", "--results-dir", "results"], capsys, "no results under results", in_tmp)
    fails(["plot", "--results-dir", "results", "--figures-dir", "/proc/figs"], capsys, "--figures-dir", in_tmp)


@pytest.mark.parametrize("argv, expected", [
    (["generate", "--prompt-len", "10", "--blocks-per-instance", "1000000000000"], "GiB of KV; this machine has"),
    (["generate", "--prompt-len", "100000000000"], "--prompt-len"),
    (["generate", "--prompt-len", "10", "--instances", "100000"], "--instances"),
    (["attention", "check", "--lengths", "100000000000"], "expected integers <= 1048576"),
    (["workloads", "generate", "--trace", "1", "--rate", "1e-300", "--num-requests", "3", "--out", "x.jsonl"],
     "raise the rate"),
])
def test_sizes_beyond_the_machine_are_refused_up_front(in_tmp, capsys, argv, expected):
    fails(argv, capsys, expected, in_tmp)


@pytest.mark.parametrize("argv, expected", [
    (["simulate", "--workload", "w.jsonl", "--model", "llama-tiny"], "no non-attention profile of llama-tiny"),
    (["simulate", "--workload", "w.jsonl", "--link", "x"], "unknown link 'x'; give intra-node, inter-node"),
    (["simulate", "--workload", "w.jsonl", "--model", "opt-13b", "--gpu", "H100-SXM"], "unknown model 'opt-13b': choose"),
    (["generate", "--prompt-len", "100", "--block-size", "4", "--blocks-per-instance", "3", "--instances", "4",
      "--no-pooling"], "raise --blocks-per-instance (with --no-pooling"),
])
def test_messages_say_what_to_change(in_tmp, capsys, argv, expected):
    workload(in_tmp, [GOOD])
    err = fails(argv, capsys, expected, in_tmp)
    assert "tensor-parallel degree" not in err and "raise --instances" not in err.replace("or --instances", "")


def test_changed_param_is_a_new_run_and_same_id_other_params_is_an_error(in_tmp, capsys):
    base = ["run", "--experiment", "migration", "--quick", "--results-dir", "results"]
    main(base)
    main([*base, "--param", "align=false"])
    main([*base, "--param", "align=true"])  # the default again: the first run, skipped
    log = capsys.readouterr().err  # the run's log is on stderr, its table on stdout
    runs = sorted(p.parent.name for p in (in_tmp / "results" / "migration").glob("*/result.json"))
    assert len(runs) == 2 and runs[0] == "sim-quick-seed0" and runs[1].startswith("sim-quick-seed0-p")
    assert log.count("exists; skipped") == 1
    stored = [json.loads((in_tmp / "results" / "migration" / r / "result.json").read_text()) for r in runs]
    assert [s["params"]["extra"]["align"] for s in stored] == [True, False]
    assert stored[0]["data"] != stored[1]["data"]
    fails([*base, "--param", "align=false", "--run-id", "sim-quick-seed0"], capsys, "holds another run", in_tmp)


def test_written_files_follow_the_umask(in_tmp, capsys):
    from repro.framework.figures import new_figure, save
    old = os.umask(0o027)
    try:
        main(["workloads", "generate", "--trace", "1", "--rate", "1", "--num-requests", "3", "--out", "w.jsonl"])
        written = save(new_figure()[0], str(in_tmp / "figs"), "f")
    finally:
        os.umask(old)
    for path in [in_tmp / "w.jsonl", *map(Path, written)]:
        assert path.stat().st_mode & 0o777 == 0o640, path


def test_list_params_and_experiment_help_show_the_keys(capsys):
    main(["run", "--list-params", "kv-move"])
    listed = capsys.readouterr().out
    main(["run", "--experiment", "kv-move", "--help"])
    helped = capsys.readouterr().out
    for text in (listed, helped):
        assert "batch_size=integer >= 1 (default 64)" in text and "context_len=" in text


def test_top_level_help_imports_no_command():
    code = ("import sys; from repro.cli import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "heavy = [m for m in ('torch', 'numpy', 'jsonschema', 'repro.commands.run') if m in sys.modules]\n"
            "print(heavy, file=sys.stderr)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])})
    assert done.stderr.strip() == "[]" and "simulate" in done.stdout


def test_a_refusal_by_the_machine_is_one_line(in_tmp, capsys):
    (in_tmp / "results" / "migration" / "sim-full-seed0").mkdir(parents=True)
    (in_tmp / "figs" / "distkv-llm-fig9.png").mkdir(parents=True)  # a folder where the figure goes
    source = Path(__file__).parents[2] / "results" / "migration" / "sim-full-seed0" / "result.json"
    if not source.is_file():
        pytest.skip("the committed migration result is not in this checkout")
    (in_tmp / "results" / "migration" / "sim-full-seed0" / "result.json").write_text(source.read_text())
    fails(["plot", "--experiment", "migration", "--results-dir", "results", "--figures-dir", "figs"], capsys,
          "Is a directory: figs/distkv-llm-fig9.png", in_tmp)
