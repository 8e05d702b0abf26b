"""sensitivity --quick: every arm of the chosen inputs per group, one default arm each, chunking off being the
default run, and a slower prefill lowering every system's plateau."""
import json

from repro.framework.base import RunParams
from repro.framework.registry import get_experiment
from repro.experiments.sensitivity.experiment import ARMS, DEFAULTS, arm_group, owners
from repro.results import load_results, run_and_save


def test_sensitivity_quick_arms_defaults_and_direction(tmp_path):
    exp = get_experiment("sensitivity")
    params = RunParams(quick=True, extra={"traces": "0", "inputs": "prefill_tflops,chunked_prefill_tokens",
                                          "short_requests": "40"})
    path, _ = run_and_save(exp, params, tmp_path, log=lambda line: None)
    data = json.loads(path.read_text())["data"]
    prefill = [r for r in data["rows"] if r["input"] == "prefill_tflops"]
    assert [r["label"] for r in prefill] == [label for _, label in ARMS["prefill_tflops"]]
    assert sum(r["default"] for r in prefill) == 1
    (off,) = [r for r in data["rows"] if r["input"] == "chunked_prefill_tokens" and r["default"]]
    default = next(r for r in prefill if r["default"])
    assert off["plateau_tok_s"] == default["plateau_tok_s"] and off["ratio"] == default["ratio"]
    slow, calibrated = prefill[0], next(r for r in prefill if r["default"])
    for system, values in slow["plateau_tok_s"].items():
        assert values[0] < calibrated["plateau_tok_s"][system][0]
    rows = exp.claims(load_results(tmp_path, exp))
    assert rows and all(r.claim_id == "e2e-vs-vllm-m" for r in rows)
    assert all("DistServe fit" in r.note for r in rows if "prefill_tflops (median over groups)" in r.metric)
    assert any("largest change" in r.note for r in rows)


def test_runs_that_cannot_differ_run_once():
    """Each input's default arm is one climb; a baseline (no pooling) climbs once for all link and peer-call
    arms; every other arm and system climbs on its own."""
    from repro.framework.base import RunParams as P
    from repro.experiments.e2e import curve_groups, sizes
    from reference_impl.calibration.links import DEFAULT_LINK
    params = P(quick=True, extra={"traces": "0,3"})
    base = curve_groups(params, sizes(params), link=DEFAULT_LINK, source="fitted")
    arms = [(inp, value, g, arm_group(g, inp, value)) for inp in ARMS for value, _ in ARMS[inp] for g in base]
    owner = owners([a[3] for a in arms])
    for i, (inp, value, g, arm) in enumerate(arms):
        first_default = next(k for k, a in enumerate(arms) if a[2] is g and a[1] == DEFAULTS[a[0]])
        for system in arm.systems:
            if value == DEFAULTS[inp] or (inp in ("link", "peer_call_ms") and system != "infinite-llm"):
                assert owner[i][system] == first_default
            else:
                assert owner[i][system] == i
    assert sum(i in own.values() for i, own in enumerate(owner)) == len(arms) - (len(ARMS) - 1) * len(base)


def test_a_batch_cap_arm_reads_the_default_caps_point_only_below_both_caps():
    from repro.experiments.sensitivity.experiment import cap_twin_point
    from repro.serving.tasks import PointTask
    from reference_impl.sim.config import sim_engine
    from reference_impl.systems.registry import cluster
    base = cluster("llama2-7b", "A100-80GB-SXM", 4, engine=sim_engine(max_batch_size=64))
    task = PointTask("vllm-m", base, (), 5.0, "t", 0, steady_only=True)
    twin = {"rate_per_s": 5.0, "seed": 0, "peak_batch_size": 63, "steady_output_tok_s": -1.0, "wall_s": 2.0}
    assert cap_twin_point({"vllm-m": [twin]}, 256, task) == {**twin, "wall_s": 0.0}
    for other in ({**twin, "peak_batch_size": 64}, {**twin, "rate_per_s": 5.5}, {**twin, "seed": 1},
                  {**twin, "peak_batch_size": None}):
        assert cap_twin_point({"vllm-m": [other]}, 256, task) is None  # simulated
    assert cap_twin_point({"vllm-s": [twin]}, 256, task) is None
    assert cap_twin_point({"vllm-m": [twin]}, 32, task) is None  # the default cap binds


def test_batch_cap_arms_on_long_requests_are_the_default_run(tmp_path):
    exp = get_experiment("sensitivity")
    lines = []
    path, _ = run_and_save(exp, RunParams(quick=True, extra={"traces": "3", "inputs": "max_batch_size"}), tmp_path,
                           log=lines.append)
    rows = json.loads(path.read_text())["data"]["rows"]
    default = next(r for r in rows if r["default"])
    assert all(r["plateau_tok_s"] == default["plateau_tok_s"] for r in rows)
    (copied,) = [line for line in lines if line.startswith("batch-cap arms:")]
    assert int(copied.split()[2]) >= 2 * len(default["plateau_tok_s"])  # each system of both other caps
