"""The serving experiments end to end on the sim backend: properties of the e2e --quick curves (the sweep
brackets saturation, curves rise then flatten, the plateau and its seed spread), determinism, schemas, figures,
claim rows, and bad input through the CLI (one line, exit 2, nothing written)."""
import json
import math

import pytest
from click.testing import CliRunner

from repro.framework.base import RunParams
from repro.framework.registry import get_experiment
from repro.results import load_results, run_and_save

QUIET = dict(log=lambda message: None)
SMALL = {"seeds": "2", "short_requests": "60", "long_requests": "8", "workers": "1"}


def _without_wall_times(x):
    if isinstance(x, dict):
        return {k: _without_wall_times(v) for k, v in x.items() if k != "wall_s"}
    return [_without_wall_times(v) for v in x] if isinstance(x, list) else x


@pytest.fixture(scope="module")
def e2e_quick(tmp_path_factory):
    """One small e2e --quick run (trace 0 on 4 GPUs, trace 3), saved, for the property tests below."""
    root = tmp_path_factory.mktemp("e2e")
    exp = get_experiment("e2e")
    path, _ = run_and_save(exp, RunParams(quick=True, extra=dict(SMALL)), root, **QUIET)
    return root, json.loads(path.read_text())["data"]


def _curve(group, system, seed):
    return sorted((p for p in group["points"] if p["system"] == system and p["seed"] == seed),
                  key=lambda p: p["rate_per_s"])


def _offered_tok_s(point, mean_output):
    return point["rate_per_s"] * mean_output


def test_sweep_brackets_the_measured_saturation_with_the_same_rates_for_every_system(e2e_quick):
    _, data = e2e_quick
    for g in data["groups"]:
        sat = g["saturation_per_s"]
        assert len(g["rates_per_s"]) >= 6 and set(sat) == {"infinite-llm", g["baseline"]}
        assert min(g["rates_per_s"]) <= 0.5 * min(sat.values()) and max(g["rates_per_s"]) > max(sat.values())
        for seed in g["seeds"]:
            for system in sat:
                added = g["plateau"][system]["added_rates_per_s"]
                assert [p["rate_per_s"] for p in _curve(g, system, seed)] == g["rates_per_s"] + added
                assert all(b == pytest.approx(2 * a, rel=1e-3) for a, b in zip([g["rates_per_s"][-1]] + added, added))


def test_curves_rise_with_load_then_flatten(e2e_quick):
    """Below saturation the steady-state throughput follows the offered load and latency stays near its
    unloaded value; past it the throughput grows less than the load (the plateau) and latency rises. A queue
    needs requests to build: the quick long-trace group (8 requests) is only checked to rise."""
    _, data = e2e_quick
    checked = 0
    for g in data["groups"]:
        if g["num_requests"] < 50:
            continue
        checked += 1
        for seed in g["seeds"]:
            for system in g["saturation_per_s"]:
                curve = _curve(g, system, seed)
                tok = [p["steady_output_tok_s"] for p in curve]
                assert tok[-1] > tok[0] > 0
                low, high = curve[0], curve[-1]
                gain_tok, gain_load = tok[-1] / tok[0], high["rate_per_s"] / low["rate_per_s"]
                assert gain_tok < 0.9 * gain_load, (g["trace_id"], system, seed, tok)
                assert high["mean_norm_latency_s"] > low["mean_norm_latency_s"]
                assert all(p["num_finished"] == p["num_requests"] for p in curve)
    assert checked >= 1


def test_max_throughput_is_the_plateau_with_its_seed_spread(e2e_quick):
    _, data = e2e_quick
    for g in data["groups"]:
        per_seed = []
        for i, seed in enumerate(g["seeds"]):
            plateau = {}
            for system in g["saturation_per_s"]:
                plateau[system] = max(p["steady_output_tok_s"] for p in _curve(g, system, seed))
                assert plateau[system] == pytest.approx(g["max_tput_tok_s"][system][i])
            per_seed.append(plateau["infinite-llm"] / plateau[g["baseline"]])
        assert g["max_tput_ratio_min"] == pytest.approx(min(per_seed))
        assert g["max_tput_ratio_max"] == pytest.approx(max(per_seed))
        assert g["max_tput_ratio_min"] <= g["max_tput_ratio"] <= g["max_tput_ratio_max"]


def test_e2e_quick_validates_plots_and_reports_the_spread(e2e_quick):
    root, data = e2e_quick
    exp = get_experiment("e2e")
    rows = exp.claims(load_results(root, exp))
    assert {r.claim_id for r in rows} == {"e2e-vs-vllm-m", "e2e-vs-vllm-s"}
    assert all("seeds)" in r.note for r in rows)
    written = exp.plot(load_results(root, exp), str(root / "figures"))
    assert sorted(p.rsplit("/", 1)[1] for p in written) == sorted(
        f"infinite-llm-fig{name}.{ext}" for name in ("10a", "10b", "10a-latency", "10b-latency", "10a-serving")
        for ext in ("pdf", "png"))


def test_a_long_group_probes_with_a_prefix_of_its_points_requests():
    from repro.experiments.e2e import curve_groups, sizes
    from repro.serving.curves import MIN_PROBE_REQUESTS, probe_requests
    params = RunParams(extra={"traces": [0, 3], "short_requests": 150, "long_requests": 150})
    short, long_ = curve_groups(params, sizes(params), link="inter-node", source="fitted")[::2]
    for group, expected in ((short, 150), (long_, max(MIN_PROBE_REQUESTS, 75))):
        point, probe = group.make_requests(0.05, 1), probe_requests(group, 0.05, 1)
        assert len(point) == 150 and list(probe) == list(point[:expected])
    whole = RunParams(extra={**params.extra, "long_probe_fraction": 1.0})
    long_ = curve_groups(whole, sizes(whole), link="inter-node", source="fitted")[2]
    assert list(probe_requests(long_, 0.05, 1)) == list(long_.make_requests(0.05, 1))


def test_same_seed_same_numbers_in_one_or_two_processes_and_seeds_differ():
    exp = get_experiment("e2e")
    small = {**SMALL, "traces": "0", "seeds": "2", "short_requests": "40"}
    one = exp.run(RunParams(quick=True, extra=small), QUIET["log"])
    two = exp.run(RunParams(quick=True, extra={**small, "workers": "2"}), QUIET["log"])
    assert _without_wall_times(two) == _without_wall_times(one)
    points = one["groups"][0]["points"]
    by_seed = [[p["steady_output_tok_s"] for p in points if p["seed"] == s] for s in (0, 1)]
    assert by_seed[0] != by_seed[1]


def test_e2e_datasets_quick_runs_a_curve_per_system():
    data = get_experiment("e2e-datasets").run(RunParams(quick=True, extra={"seeds": "1", "num_requests": "8"}),
                                              QUIET["log"])
    (g,) = data["groups"]
    assert g["dataset_id"] == 1 and {p["system"] for p in g["points"]} == {"infinite-llm", "vllm-s"}
    added = sum(len(r["added_rates_per_s"]) for r in g["plateau"].values())
    assert len(g["points"]) == 2 * len(g["rates_per_s"]) + added and g["max_tput_ratio"] > 0


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
    (["--experiment", "e2e", "--param", "short_requests=many"], "short_requests"),
    (["--experiment", "e2e", "--param", "long_probe_fraction=1.5"], "long_probe_fraction"),
    (["--experiment", "e2e-datasets", "--param", "probe_fraction=0"], "probe_fraction"),
])
def test_run_bad_param_is_one_line_and_leaves_no_result(tmp_path, capsys, args, message):
    assert _cli(["run", "--quick", "--results-dir", str(tmp_path)] + args) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error: ")]  # not the log's
    assert len(err) == 1 and message in err[0] and not any(tmp_path.rglob("*.json"))
