"""The designs experiment on the sim backend: a --quick run validates against its schema and holds every design of
the catalog; ratios are each design's plateau over its group's baseline (recomputed here from the points); the
common rate is half the weakest design's saturation; a design that cannot build a cluster or whose simulation
raises is reported failed in that group while the others run; bad params give one line; the claims' rows; throughput
per dollar and per accelerator from lamina Table 1's prices; pd-disaggregation's split searched for the group's
requests and its goodput claim; Llumnix's claim against its own dispatch without migration."""
import json
import sys
import types

import numpy as np
import pytest

from repro.experiments.designs.claims import CLAIMS, DesignClaim, Arm, claim_rows
from repro.framework.base import RunParams
from repro.framework.registry import get_experiment
from repro.serving.tasks import workload
from repro.results import run_and_save, validate_result
from reference_impl.errors import InputError
from reference_impl.sim.policy import Policy
from reference_impl.systems.catalog import DESIGNS
from reference_impl.systems.design import Design
from reference_impl.systems.pd_disagg.knobs import shape_of

QUIET = dict(log=lambda message: None)
SMALL = {"workers": "1", "store": "off"}


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    root = tmp_path_factory.mktemp("designs")
    path, _ = run_and_save(get_experiment("designs"), RunParams(quick=True, extra=dict(SMALL)), root, **QUIET)
    return json.loads(path.read_text())


def test_quick_result_validates_and_holds_every_design_of_the_catalog(quick):
    validate_result(quick, "designs.schema.json")
    data = quick["data"]
    assert data["designs"] == list(DESIGNS)
    assert {g["trace_id"] for g in data["groups"]} == {0, 3} and len(data["seeds"]) == 1
    for g in data["groups"]:
        assert set(g["designs"]) == set(DESIGNS)
        for name, row in g["designs"].items():
            assert row["status"] == "failed" or any(p["system"] == name for p in g["points"])


def _plateau(points, system, seed):
    return max(p["steady_output_tok_s"] for p in points if p["system"] == system and p["seed"] == seed)


def test_ratios_are_each_plateau_over_the_groups_own_baseline(quick):
    for g in quick["data"]["groups"]:
        assert g["baseline"] == ("vllm-m" if g["trace_id"] <= 2 else "vllm-s")
        assert g["designs"][g["baseline"]]["ratio"] == pytest.approx(1.0)
        for name, row in g["designs"].items():
            if row["status"] != "ok":
                continue
            ratios = [_plateau(g["points"], name, s) / _plateau(g["points"], g["baseline"], s) for s in g["seeds"]]
            assert row["ratio"] == pytest.approx(float(np.median(ratios)))
            assert row["at_plateau"]["steady_output_tok_s"] == pytest.approx(max(row["max_tput_tok_s"]))


def test_common_rate_is_the_grid_rate_nearest_half_the_weakest_saturation(quick):
    for g in quick["data"]["groups"]:
        ok = {name: row for name, row in g["designs"].items() if row["status"] == "ok"}
        whole = [n for n in ok if not any(p["num_rejected"] for p in g["points"] if p["system"] == n)] or list(ok)
        target = 0.5 * min(ok[n]["saturation_per_s"] for n in whole)
        assert g["common_rate_per_s"] == min(g["rates_per_s"], key=lambda r: abs(np.log(r / target)))
        for row in g["designs"].values():
            at = row.get("at_common_rate")
            if at and at["p99_ttft_s"] is not None:
                assert at["p50_ttft_s"] <= at["p99_ttft_s"] and 0 <= at["counters"]["prefill_time_share"] <= 1


def test_cost_counts_every_simulated_point_per_design(quick):
    cost = quick["data"]["cost"]
    points = sum(len(g["points"]) for g in quick["data"]["groups"] + quick["data"]["arms"])
    assert sum(d["points"] for d in cost["per_design"].values()) == cost["points"] >= points  # and the probes
    assert cost["predicted_wall_s"]["64"] <= cost["predicted_wall_s"]["2"] <= cost["predicted_wall_s"]["1"]
    assert cost["predicted_wall_s"]["1"] == pytest.approx(cost["cpu_s"], rel=1e-6)


def test_cost_on_a_shared_sweep_counts_only_the_designs_nodes_and_their_own_waits():
    from repro.experiments.designs.cost import run_cost
    from repro.serving.task_graph import Node

    def node(i, exp, cpu_s, after, how="run"):
        return Node(i, exp, f"g{i}", "vllm-m", 1.0, 0, cpu_s, how, after)

    # e2e's long point 0 feeds e2e's 3; designs' 1 -> 2 -> 4, and 4 also waited for e2e's point 3
    nodes = [node(0, "e2e", 50.0, []), node(1, "designs", 1.0, []), node(2, "designs", 2.0, [1]),
             node(3, "e2e", 50.0, [0]), node(4, "designs", 3.0, [2, 3]), node(5, "designs", 0.0, [1], "shared")]
    cost = run_cost(nodes, "designs")
    assert cost["points"] == 3 and cost["cpu_s"] == pytest.approx(6.0)
    assert cost["critical_path_s"] == pytest.approx(6.0)  # 1 -> 2 -> 4, not through e2e's 100 s
    assert cost["predicted_wall_s"]["64"] == pytest.approx(6.0)


class _RaisingPolicy(Policy):
    def dispatch(self, seq):
        raise RuntimeError("this design cannot dispatch")


def _no_small_clusters(config):
    if config.engine.num_instances < 4:
        raise InputError("needs four instances")
    return config


@pytest.fixture
def broken_designs(monkeypatch):
    module = types.ModuleType("broken_designs_for_test")
    module.CLUSTER = Design("broken-cluster", "raises on small clusters", configure=_no_small_clusters)
    module.SIM = Design("broken-sim", "its policy raises", configure=lambda c: c, policy=_RaisingPolicy)
    for name, attr in (("broken-cluster", "CLUSTER"), ("broken-sim", "SIM")):
        sub = types.ModuleType(f"broken_designs_for_test.{attr}")
        sub.DESIGN = getattr(module, attr)
        monkeypatch.setitem(sys.modules, sub.__name__, sub)
        monkeypatch.setitem(DESIGNS, name, sub.__name__)


def test_a_failing_design_is_reported_in_its_group_and_the_others_run(broken_designs, tmp_path):
    params = RunParams(quick=True, extra={**SMALL, "designs": "infinite-llm,broken-cluster,broken-sim"})
    path, _ = run_and_save(get_experiment("designs"), params, tmp_path, **QUIET)
    data = json.loads(path.read_text())["data"]
    by_trace = {g["trace_id"]: g["designs"] for g in data["groups"]}
    assert by_trace[0]["broken-cluster"]["status"] == "ok"  # 4 instances: it serves trace 0
    assert "needs four instances" in by_trace[3]["broken-cluster"]["error"]  # 2 instances on trace 3
    for rows in by_trace.values():
        assert "cannot dispatch" in rows["broken-sim"]["error"] and rows["infinite-llm"]["status"] == "ok"


@pytest.mark.parametrize("param, words", [("designs=nope", "unknown design nope"), ("seeds=0", "seeds"),
                                          ("traces=9", "trace")])
def test_bad_params_give_one_line_and_write_nothing(repro_cli, tmp_path, param, words):
    code, out, err = repro_cli(["run", "--experiment", "designs", "--quick", "--results-dir", str(tmp_path),
                                "--param", param])
    errors = [line for line in err.splitlines() if line.startswith("error: ")]  # the run's log is on stderr too
    assert code != 0 and len(errors) == 1 and words in errors[0] and "Traceback" not in err
    assert not list(tmp_path.rglob("result.json"))


def test_claim_rows_measure_declared_claims_and_mark_the_rest_not_yet_measured(quick):
    rows = claim_rows(quick)
    infinite = [r for r in rows if r["claim_id"] == "infinite-llm"]
    assert {r["metric"].split(", trace ")[1][0] for r in infinite} == {"0", "3"}  # one row per group run
    for r in infinite:
        g = next(g for g in quick["data"]["groups"] if f"trace {g['trace_id']}," in r["metric"])
        assert r["reproduced"] == pytest.approx(g["designs"]["infinite-llm"]["ratio"])
        assert r["verdict"] == ("inside" if r["paper_low"] < r["reproduced"] <= r["paper_high"] else "outside")
    absent = {"future-design": (DesignClaim("max_tput", Arm("vllm-m"), (0,), "2x", 1.0, 2.0, "paper"),)}
    assert claim_rows(quick, absent)[0]["verdict"] == "not yet measured"
    assert "not in the catalog" in claim_rows(quick, absent)[0]["note"]
    assert set(CLAIMS) >= {"infinite-llm", "loongserve", "llumnix"}
    undeclared = {r["claim_id"] for r in rows if r["verdict"] == "no claim"}
    assert undeclared == set(DESIGNS) - set(CLAIMS) - {"vllm-m", "vllm-s"}


def test_figure_shows_every_group_and_design_and_marks_rejections(quick, tmp_path):
    from repro.experiments.designs.figure import grid
    data = quick["data"]
    ratios, texts, labels, rejects = grid(data["groups"], data["designs"])
    assert ratios.shape == (len(data["groups"]), len(data["designs"])) == (len(labels), len(texts[0]))
    for i, g in enumerate(data["groups"]):
        assert ratios[i, data["designs"].index(g["baseline"])] == pytest.approx(1.0)
        for j, name in enumerate(data["designs"]):
            assert ("rej" in texts[i][j]) == bool(rejects[i, j])
            assert (texts[i][j] == "failed") == (g["designs"][name]["status"] != "ok")
    written = get_experiment("designs").plot([quick], str(tmp_path))
    panels = sorted({g["panel"] for g in data["groups"]})
    assert sorted(p.rsplit("/", 1)[1] for p in written) == sorted(
        f"{name}.{ext}" for name in ("designs-max-tput", *(f"designs-latency-{panel}" for panel in panels))
        for ext in ("pdf", "png"))


def test_throughput_per_dollar_and_per_accelerator_price_each_cluster_at_lamina_table_1(quick):
    devices = json.loads(open("reference_impl/systems/lamina/devices.json").read())["devices"]
    a100, rtx = devices["A100-80G"]["price_usd"], devices["RTX 3090"]["price_usd"]
    for g in quick["data"]["groups"]:
        base = g["designs"][g["baseline"]]
        for name, row in g["designs"].items():
            if row["status"] != "ok":
                continue
            hw = row["hardware"]
            assert hw["num_gpus"] == g["num_gpus"]  # every design reshapes the same GPUs (pd's split both sides)
            memory = hw["accelerators"] - hw["num_gpus"]
            assert (memory > 0) == (name == "lamina")
            assert hw["price_usd"] == pytest.approx(hw["num_gpus"] * a100 + memory * rtx)
            assert row["ratio_per_usd"] == pytest.approx(row["ratio"] * base["hardware"]["price_usd"] / hw["price_usd"])
            assert row["max_tput_per_accelerator_tok_s"] * hw["accelerators"] == pytest.approx(
                row["max_tput_median_tok_s"])
            same = name != "lamina"
            assert (row["ratio_per_accelerator"] == pytest.approx(row["ratio"])) == same
            if not same:
                assert row["ratio_per_usd"] < row["ratio"] and row["ratio_per_accelerator"] < row["ratio_per_usd"]


def test_pd_split_is_searched_for_the_groups_requests(quick):
    data = quick["data"]
    for g in data["groups"]:
        requests = workload(trace_id=g["trace_id"], num_requests=g["num_requests"], rate_per_s=1.0,
                            seed=data["seeds"][0], source=data["source"])
        shape = shape_of(requests)
        knobs = g["design_knobs"]["pd-disaggregation"]["workload"]
        assert knobs["mean_prompt_tokens"] == pytest.approx(shape.mean_prompt_tokens)
        assert knobs["long_context_tokens"] == shape.long_context_tokens
        pd = [p for p in g["points"] if p["system"] == "pd-disaggregation" and p.get("counters")]
        assert pd and all(p["counters"]["prefill_gpus"] + p["counters"]["decode_gpus"] == g["num_gpus"] for p in pd)


def test_pd_goodput_claim_and_llumnix_against_its_own_dispatch_only(quick):
    data, rows = quick["data"], claim_rows(quick)
    for r in data["goodput"]:
        assert r["trace_id"] in (0, 1, 2) and r["num_gpus"] in {g["num_gpus"] for g in data["groups"]}
        if r["vllm_m_goodput_req_s"] > 0:
            assert r["ratio"] == pytest.approx(r["pd_goodput_req_s"] / r["vllm_m_goodput_req_s"])
        assert r["pd_attainment"] >= 0.9 or r["pd_goodput_req_s"] == 0
    pd = [r for r in rows if r["claim_id"] == "pd-disaggregation"]
    assert pd and all(r["verdict"] in ("inside", "outside") for r in pd) and "goodput" in pd[0]["metric"]
    lamina = [r for r in rows if r["claim_id"] == "lamina"]
    assert {r["metric"].split(", trace ")[1][0] for r in lamina} == {"0", "3"}
    arm = next(a for a in data["arms"] if a["arm"] == "llumnix dispatch-only")
    assert arm["trace_id"] == 0 and arm["baseline"] == "llumnix"
    assert all(p["counters"].get("migrations_completed", 0) == 0 for p in arm["points"] if p.get("counters"))
    llumnix = next(r for r in rows if r["claim_id"] == "llumnix")
    assert "dispatch-only" in llumnix["metric"] and llumnix["verdict"] in ("inside", "outside")
