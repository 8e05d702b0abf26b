"""The serving experiments end to end on the sim backend: pinned e2e --quick throughput, determinism, schemas,
figures, claim rows, and bad input through the CLI (one line, exit 2, nothing written)."""
import json
import math

import pytest
from click.testing import CliRunner

from repro.experiments.base import RunParams
from repro.experiments.registry import get_experiment
from repro.results import load_results, run_and_save

# e2e --quick, seed 0: output tokens/s per (trace, system, rate). Deterministic: update only on purpose (a
# change of the cost model, the control plane or the workloads), with the reason in the commit message.
PINNED_E2E_QUICK = {
    (0, "infinite-llm", 26.13): 255.6136016648796,
    (0, "vllm-m", 26.13): 244.1433411486075,
    (0, "infinite-llm", 104.5): 264.33267819621454,
    (0, "vllm-m", 104.5): 252.08530842140883,
    (3, "infinite-llm", 0.03802): 10.305671434273838,
    (3, "vllm-s", 0.03802): 10.444269469124464,
    (3, "infinite-llm", 0.1521): 24.930118300962103,
    (3, "vllm-s", 0.1521): 28.028051209248034,
}
QUIET = dict(log=lambda message: None)



def _without_wall_times(x):
    if isinstance(x, dict):
        return {k: _without_wall_times(v) for k, v in x.items() if k != "sim_wall_s"}
    return [_without_wall_times(v) for v in x] if isinstance(x, list) else x


@pytest.mark.parametrize("name", ["e2e", "e2e-datasets"])
def test_points_in_worker_processes_give_the_same_data(name):
    exp = get_experiment(name)
    one = exp.run(RunParams(quick=True, extra={"workers": "1"}), QUIET["log"])
    two = exp.run(RunParams(quick=True, extra={"workers": "2"}), QUIET["log"])
    assert _without_wall_times(two) == _without_wall_times(one)
    assert len(one["groups"]) >= 2 and all(g["points"] for g in one["groups"])

def test_e2e_quick_throughput_is_pinned(tmp_path):
    exp = get_experiment("e2e")
    path, ran = run_and_save(exp, RunParams(quick=True), tmp_path, **QUIET)
    data = json.loads(path.read_text())["data"]
    got = {(g["trace_id"], p["system"], p["rate_per_s"]): p["output_tok_s"] for g in data["groups"] for p in g["points"]}
    assert got.keys() == PINNED_E2E_QUICK.keys()
    for key, value in PINNED_E2E_QUICK.items():
        assert math.isclose(got[key], value, rel_tol=1e-9), (key, got[key], value)
    assert all(p["num_finished"] == p["num_requests"] for g in data["groups"] for p in g["points"])
    rows = exp.claims(load_results(tmp_path, exp))
    assert {r.claim_id for r in rows} == {"e2e-vs-vllm-m", "e2e-vs-vllm-s"}
    written = exp.plot(load_results(tmp_path, exp), str(tmp_path / "figures"))
    assert sorted(p.rsplit("/", 1)[1] for p in written) == [f"infinite-llm-fig10{panel}.{ext}" for panel in "ab"
                                                            for ext in ("pdf", "png")]


def test_small_e2e_run_gives_the_same_numbers_twice():
    exp = get_experiment("e2e")
    params = RunParams(quick=True, extra={"short_requests": "20", "long_requests": "3"})
    first, second = exp.run(params, print), exp.run(params, print)
    strip = lambda d: [[{k: v for k, v in p.items() if k != "sim_wall_s"} for p in g["points"]] for g in d["groups"]]
    assert strip(first) == strip(second) and first["link_sweep"] == second["link_sweep"]


@pytest.mark.parametrize("name, figure", [("context-length", "infinite-llm-fig9.png"),
                                          ("context-length", "distkv-llm-fig7.png"),
                                          ("perf-model", "infinite-llm-fig7.png")])
def test_quick_runs_validate_plot_and_report(tmp_path, name, figure):
    exp = get_experiment(name)
    run_and_save(exp, RunParams(quick=True), tmp_path, **QUIET)
    results = load_results(tmp_path, exp)
    assert any(p.endswith(figure) for p in exp.plot(results, str(tmp_path)))
    rows = exp.claims(results)
    assert rows and all(r.reproduced is None or r.reproduced > 0 for r in rows)


def test_context_length_quick_limits():
    data = get_experiment("context-length").run(RunParams(quick=True), lambda m: None)
    for row in data["settings"]:
        lim = row["max_context"]
        assert lim["infinite-llm"] == row["num_instances"] * lim["vllm-m"] and lim["vllm-s"] > lim["vllm-m"]
        past = [p for p in row["points"] if p["length"] == "past-vllm-m"]
        assert {p["system"]: p["batch"] for p in past}["vllm-m"] == 0
        assert all(p["decode_tok_s"] for p in past if p["system"] != "vllm-m")


def test_perf_model_quick_model_matches_simulation():
    data = get_experiment("perf-model").run(RunParams(quick=True), lambda m: None)
    for m, s in zip(data["modelled"], data["simulated"]):
        assert m["k"] == s["k"]
        assert math.isclose(m["aggregate_tok_s"], s["aggregate_tok_s"], rel_tol=0.03)


def _cli(args):
    from repro.cli import main
    try:
        main(args)
    except SystemExit as exc:
        return exc.code
    return 0


def test_simulate_cli_bad_input_is_one_line_and_writes_nothing(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"req_id": 0}\n')
    out = tmp_path / "out.json"
    assert _cli(["simulate", "--workload", str(bad), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "arrival_s" in err[0] and not out.exists()
    good = tmp_path / "good.jsonl"
    from workloads import generate, save_jsonl
    from workloads.generate import SourceOptions
    save_jsonl(good, generate(trace_id=0, num_requests=5, rate_per_s=5.0, seed=0, options=SourceOptions("fitted")))
    for args, message in ((["--model", "gpt-5"], "unknown model"), (["--gpu", "Z80"], "unknown GPU"),
                          (["--model", "llama2-70b", "--tp", "1"], "does not fit"),
                          (["--gpus", "3", "--tp", "2"], "does not split")):
        assert _cli(["simulate", "--workload", str(good), "--out", str(out)] + args) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0] and not out.exists(), (args, err)
    assert _cli(["simulate", "--workload", str(good), "--out", str(out)]) == 0
    assert json.loads(out.read_text())["summary"]["num_finished"] == 5


def test_run_cli_unknown_experiment_is_one_error():
    from repro.cli import cli
    res = CliRunner().invoke(cli, ["run", "--experiment", "fig99"])
    assert res.exit_code == 2 and "fig99" in res.output


@pytest.mark.parametrize("args, message", [
    (["--experiment", "perf-model", "--param", "link=fast"], "unknown link"),
    (["--experiment", "e2e", "--param", "short_requests=many"], "not a valid int"),
])
def test_run_bad_param_is_one_line_and_leaves_no_result(tmp_path, capsys, args, message):
    assert _cli(["run", "--quick", "--results-dir", str(tmp_path)] + args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0] and not any(tmp_path.rglob("*.json"))
