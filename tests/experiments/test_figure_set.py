"""`repro figures`: several experiments on one sweep give the points each gives alone, a point two of them share
runs once, and a second set keeps what exists (the local measurements unless asked)."""
import json
import sys
import textwrap

import pytest

from repro.cli import main
from repro.commands.figures import split_params
from repro.framework import registry
from repro.framework.base import RunParams
from repro.framework.figure_set import SetOptions, plot_set, run_set
from repro.framework.registry import get_experiment


def _without_wall_times(x):
    if isinstance(x, dict):
        return {k: _without_wall_times(v) for k, v in x.items() if k != "wall_s"}
    return [_without_wall_times(v) for v in x] if isinstance(x, list) else x


def _counts(lines: list[str]) -> dict[str, dict]:
    """{experiment: {run, stored, shared}} from the sweep's closing lines."""
    out = {}
    for line in lines:
        name, _, rest = line.partition(": ")
        words = rest.split()
        if " points run, " in line and len(words) > 6:
            out[name] = {"run": int(words[0]), "stored": int(words[3]), "shared": int(words[7])}
    return out


SAME = {"traces": "0", "short_requests": "40"}
EACH = {"e2e": {**SAME, "seeds": "1"}, "sensitivity": {**SAME, "inputs": "max_batch_size"}}


def test_one_sweep_gives_each_experiment_its_own_points_and_runs_shared_points_once(tmp_path):
    alone, alone_lines = {}, []
    for name, extra in EACH.items():
        data = get_experiment(name).run(RunParams(quick=True, extra={**extra, "store": "off"}), alone_lines.append)
        alone[name] = json.loads(json.dumps(data))
    lines = []
    written = run_set(tuple((name, "sim") for name in EACH), SetOptions(quick=True, sweep={"store": "off"},
                                                                         each=EACH, results_dir=str(tmp_path)),
                      lines.append)
    assert len(written) == 2
    for path in written:
        result = json.loads(path.read_text())
        assert _without_wall_times(result["data"]) == _without_wall_times(alone[result["experiment"]])
    apart, together = _counts(alone_lines), _counts(lines)
    assert set(together) == set(EACH)
    shared = sum(c["shared"] for c in together.values())
    assert shared >= 4  # sensitivity's default arm: each system's probes up to past saturation, as e2e's
    assert sum(c["run"] for c in together.values()) == sum(c["run"] for c in apart.values()) - shared
    assert all(c["stored"] == 0 for c in together.values())


TOY = textwrap.dedent('''
    from pathlib import Path

    from repro.framework.base import Experiment, default_run_id
    from repro.serving.sweep import run_in_sweep

    CALLS = []

    def measure(params, log):
        CALLS.append("local")
        return {"value": 1.0}

    async def on_sweep(params, log, sweep):
        CALLS.append("sim")
        return {"value": 2.0}

    def run(params, log):
        return run_in_sweep(params, log, "toy-sim", on_sweep)

    def plot(results, figures_dir):
        CALLS.append("plot")
        path = Path(figures_dir) / "toy.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(str(results[0]["data"]["value"]))
        return [str(path)]

    SIM = Experiment("toy-sim", ("toy Fig 1",), "toy.schema.json", run, default_run_id, plot=plot,
                     on_sweep=on_sweep)
    LOCAL = Experiment("toy-local", ("toy Fig 2",), "toy.schema.json", measure, default_run_id,
                       backends=("local", "sim"))
''')
MEMBERS = (("toy-sim", "sim"), ("toy-local", "local"))


@pytest.fixture
def toys(tmp_path, monkeypatch):
    (tmp_path / "toy_set.py").write_text(TOY)
    monkeypatch.syspath_prepend(str(tmp_path))
    import toy_set
    monkeypatch.setattr(registry, "get_experiment", {"toy-sim": toy_set.SIM, "toy-local": toy_set.LOCAL}.get)
    monkeypatch.setattr("repro.framework.figure_set.get_experiment",
                        {"toy-sim": toy_set.SIM, "toy-local": toy_set.LOCAL}.get)
    import repro.results as results
    real = results.load_schema.__wrapped__
    schema = {"type": "object", "required": ["value"], "properties": {"value": {"type": "number"}}}
    monkeypatch.setattr(results, "load_schema", lambda name: schema if name == "toy.schema.json" else real(name))
    yield toy_set.CALLS
    sys.modules.pop("toy_set", None)


def test_a_second_set_keeps_results_and_measures_again_only_when_asked(toys, tmp_path):
    def again(**flags):
        toys.clear()
        written = run_set(MEMBERS, SetOptions(quick=True, sweep={"store": "off"}, results_dir=str(tmp_path),
                                              **flags), lambda line: None)
        return sorted(toys), len(written)

    assert again() == (["local", "sim"], 2)
    assert again() == ([], 0)
    assert again(force=True) == (["sim"], 1)
    assert again(remeasure=True) == (["local"], 1)


def test_figures_are_drawn_again_only_from_other_data_or_when_asked(toys, tmp_path):
    results, figures = str(tmp_path / "results"), tmp_path / "figures"
    run_set(MEMBERS, SetOptions(sweep={"store": "off"}, results_dir=results), lambda line: None)

    def draw(**flags):
        toys.clear()
        plot_set(MEMBERS, results, str(figures), lambda line: None, **flags)
        return toys.count("plot")

    assert draw() == 1
    assert draw() == 0
    run_set(MEMBERS, SetOptions(sweep={"store": "off"}, results_dir=results, force=True), lambda line: None)
    assert draw() == 0  # the same data, written again
    (figures / "toy.png").unlink()
    assert draw() == 1
    assert draw(replot=True) == 1
    result = next((tmp_path / "results" / "toy-sim").glob("*/result.json"))
    result.write_text(result.read_text().replace('"value": 2.0', '"value": 3.0'))
    assert draw() == 1


def test_params_go_to_the_sweep_or_to_one_experiment():
    sweep, each = split_params(("workers=2", "e2e.seeds=5", "sensitivity.inputs=link"))
    assert sweep == {"workers": "2"}
    assert each == {"e2e": {"seeds": "5"}, "sensitivity": {"inputs": "link"}}


@pytest.mark.parametrize("bad", ["seeds=5", "nosuch.seeds=5", "e2e.=5"])
def test_a_param_for_no_member_is_one_line_and_exit_2(bad, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["figures", "--quick", "--results-dir", str(tmp_path), "--param", bad])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and len(err.strip().splitlines()) == 1
    assert not any(tmp_path.iterdir())
