"""sim-vs-real: points are medians of repeats with the measured spread; a tiny real run against the simulator."""
import json

import numpy as np
import pytest

from repro.framework.base import RunParams
from repro.framework.registry import get_experiment
from repro.experiments.sim_vs_real.points import error_table, make_points
from repro.results import run_and_save


def summary(tok_s, ttft_s=None, tpot_s=None):
    return {"output_tok_s": tok_s, "mean_ttft_s": ttft_s, "mean_tpot_s": tpot_s, "num_finished": 1,
            "num_requests": 1, "makespan_s": 1.0, "num_steps": 1}


def test_a_point_is_the_median_of_repeats_and_keeps_the_measured_spread():
    runs = [{"system": "s", "rate_per_s": 2.0, "measured": summary(m, 0.1 * m), "predicted": summary(p, 0.1)}
            for m, p in ((90.0, 100.0), (130.0, 104.0), (100.0, 96.0))]
    runs.append({"system": "s", "rate_per_s": 1.0, "measured": summary(50.0), "predicted": summary(60.0)})
    low, high = make_points(runs)
    assert (low["rate_per_s"], high["rate_per_s"]) == (1.0, 2.0)
    assert high["num_repeats"] == 3
    assert (high["measured_output_tok_s"], high["predicted_output_tok_s"]) == (100.0, 100.0)
    assert (high["measured_output_tok_s_min"], high["measured_output_tok_s_max"]) == (90.0, 130.0)
    assert high["output_tok_s_rel_err"] == 0.0
    assert high["mean_ttft_s_rel_err"] == pytest.approx(0.1 / 10.0 - 1)
    assert high["mean_tpot_s_rel_err"] is None and high["measured_mean_tpot_s"] is None
    assert low["output_tok_s_rel_err"] == pytest.approx(0.2)
    table = error_table([low, high])["s"]
    assert table["output_tok_s"] == {"median_abs_rel_err": pytest.approx(0.1), "worst_abs_rel_err": pytest.approx(0.2),
                                     "worst_rate_per_s": 1.0, "num_points": 2}
    assert "mean_tpot_s" not in table


def test_the_engine_costs_are_per_served_step_and_per_call_over_every_designs_saturation_run():
    """Every Ray arm prices the same engine costs from its saturation runs: a design that served nothing and called
    no peer does not dilute them (the two-design arms' Infinite-LLM serves none at their size), the served and call
    costs are means weighted by their counts, and the co-run slowdown is the CPU ratio times the core share."""
    pytest.importorskip("ray")
    from repro.experiments.sim_vs_real.co_run import CoRun
    from repro.experiments.sim_vs_real.ray_calibration import engine_costs

    def engine(served, serve_ms, calls, call_ms, wall_ms, cpu_ms):
        return {"engine": {"num_served": served, "serve_ms": serve_ms, "serve_cpu_ms": serve_ms / 2,
                           "num_peer_calls": calls, "peer_call_each_ms": call_ms, "compute_ms": wall_ms,
                           "compute_cpu_ms": cpu_ms}}

    co_run = CoRun(1.3, [10.0], [13.0], 2, 16, 1.1, [9.0], [9.9])
    idle = engine(0, 0.0, 0, 0.0, 15.0, 10.0)
    costs = engine_costs({"design": engine(10, 8.0, 4, 5.0, 15.0, 10.0), "infinite-llm": idle}, co_run)
    assert costs["served_step_s"] == pytest.approx(8e-3) and costs["served_cpu_s"] == pytest.approx(4e-3)
    assert costs["peer_call_s"] == pytest.approx(5e-3)
    assert costs["co_run_slowdown"] == pytest.approx(1.1 * 1.5)
    both = engine_costs({"a": engine(10, 8.0, 1, 2.0, 10.0, 10.0), "b": engine(30, 4.0, 3, 6.0, 10.0, 10.0)}, co_run)
    assert both["served_step_s"] == pytest.approx(5e-3) and both["peer_call_s"] == pytest.approx(5e-3)
    assert engine_costs({"a": idle, "b": idle}, co_run)["served_step_s"] == 0.0  # none served: none priced


@pytest.mark.slow
def test_a_tiny_run_measures_and_predicts_every_rate(tmp_path):
    exp = get_experiment("sim-vs-real")
    params = RunParams(quick=True, extra={"num_requests": "5", "max_tokens": "24", "rates": "3,30",
                                          "max_batch_size": "4", "vllm": "off", "lamina": "off"})
    path, ran = run_and_save(exp, params, tmp_path, log=lambda _: None)
    assert ran and path.parent.name.startswith("local-quick-seed0-p")  # non-default params: own run id
    data = json.loads(path.read_text())["data"]
    assert data["clock"] == "cpu" and data["machine"]["threads"] == 1
    assert data["machine"]["loadavg_1m_min"] >= 0 and len(data["calibrations"]) == len(data["runs"]) == 2
    assert [p["rate_per_s"] for p in data["points"]] == [3.0, 30.0]
    for run in data["runs"]:
        for side in ("measured", "predicted"):
            assert run[side]["num_finished"] == run[side]["num_requests"] == 5
            assert run[side]["output_tok_s"] > 0 and run[side]["mean_ttft_s"] > 0
    predicted = [p["predicted_output_tok_s"] for p in data["points"]]
    assert predicted[1] >= predicted[0]  # more offered load: no less throughput from the deterministic simulator
    assert np.isfinite(data["errors"]["infinite-llm"]["output_tok_s"]["median_abs_rel_err"])
    assert data["vllm"].startswith("skipped") and data["lamina"] == "skipped: --param lamina=off"
    assert data["loongserve"] == "skipped: --quick (--param loongserve=on runs it)"


@pytest.mark.parametrize("param, message", [("repeats=0", "repeats must be at least 1"),
                                            ("max_tokens=1", "max_tokens must be at least 2"),
                                            ("device=tpu:0", "device='tpu:0' cannot be used"),
                                            ("clock=sundial", "choose one of wall, cpu")])
def test_bad_params_are_one_line_and_write_nothing(tmp_path, capsys, param, message):
    from repro.cli import main

    with pytest.raises(SystemExit) as info:
        main(["run", "--experiment", "sim-vs-real", "--quick", "--results-dir", str(tmp_path), "--param", param])
    err = capsys.readouterr().err.strip()
    errors = [line for line in err.splitlines() if line.startswith("error: ")]  # the run's log is on stderr too
    assert info.value.code == 2 and len(errors) == 1 and message in errors[0] and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []
