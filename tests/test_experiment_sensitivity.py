"""sensitivity --quick: every arm of the chosen inputs per group, one default arm each, the chunked-prefill arm
skipped with a note where the simulator lacks it, and a slower prefill lowering every system's plateau."""
import json

from repro.experiments.base import RunParams
from repro.experiments.registry import get_experiment
from repro.experiments.sensitivity import ARMS, DEFAULTS, arm_group, distinct_runs, has_chunked_prefill
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
    if has_chunked_prefill():
        (off,) = [r for r in data["rows"] if r["input"] == "chunked_prefill_tokens" and r["default"]]
        default = next(r for r in prefill if r["default"])
        assert off["plateau_tok_s"] == default["plateau_tok_s"] and off["ratio"] == default["ratio"]
    else:
        assert any("chunked prefill skipped" in note for note in data["notes"])
    slow, calibrated = prefill[0], next(r for r in prefill if r["default"])
    for system, values in slow["plateau_tok_s"].items():
        assert values[0] < calibrated["plateau_tok_s"][system][0]
    rows = exp.claims(load_results(tmp_path, exp))
    assert rows and all(r.claim_id == "e2e-vs-vllm-m" for r in rows)
    assert all("DistServe fit" in r.note for r in rows if "prefill_tflops (median over groups)" in r.metric)
    assert any("largest change" in r.note for r in rows)


def test_each_inputs_default_arm_is_one_run_and_every_other_arm_its_own():
    from repro.experiments.base import RunParams as P
    from repro.experiments.e2e import curve_groups, sizes
    from reference_impl.links import DEFAULT_LINK
    params = P(quick=True, extra={"traces": "0,3"})
    base = curve_groups(params, sizes(params), link=DEFAULT_LINK, source="fitted")
    arms = [(inp, value, g, arm_group(g, inp, value)) for inp in ARMS for value, _ in ARMS[inp] for g in base]
    runs = distinct_runs([a[3] for a in arms])
    for i, (inp, value, g, _) in enumerate(arms):
        if value == DEFAULTS[inp]:  # the first input's default arm of the same group
            assert runs[i] == next(k for k, a in enumerate(arms) if a[2] is g and a[1] == DEFAULTS[a[0]])
        else:
            assert runs[i] == i
    assert len(set(runs)) == len(arms) - (len(ARMS) - 1) * len(base)
