"""The engine's per-step overhead: measured by `repro profile` through the real engine, added by the cost model."""
import copy
import json

import pytest
import torch

from reference_impl.calibration import coefficients
from reference_impl.calibration.model import CalibratedPerfModel
from reference_impl.profiling.local import ProfilePlan, profile
from reference_impl.calibration.specs import model_spec
from reference_impl.calibration.perf_model import InstanceLoad, step_time_s

DECODE = {"x": [1, 65], "y": [0.001, 0.005]}
PREFILL = {"x": [100, 1000], "y": [0.002, 0.02]}


def test_the_cost_model_adds_the_measured_overhead_once_per_step(tmp_path):
    doc = copy.deepcopy(coefficients.load())
    doc["hardware"]["A100-80GB-SXM"]["step_overhead_s"] = {"llama2-7b": {"decode": DECODE, "prefill": PREFILL}}
    path = tmp_path / "with_overhead.json"
    path.write_text(coefficients.dumps(doc))
    plain = CalibratedPerfModel.for_setting(model="llama2-7b", gpu="A100-80GB-SXM")
    extra = CalibratedPerfModel.for_setting(model="llama2-7b", gpu="A100-80GB-SXM", coefficients_path=path)
    assert plain.step_overhead is None
    cases = [(InstanceLoad(1, 500), 0.001), (InstanceLoad(33, 9000), 0.001 + 0.004 * 32 / 64),
             (InstanceLoad(0, 0, prefill_tokens=1000, prefill_attn_pairs=500_500), 0.02),
             (InstanceLoad(0, 0, prefill_tokens=550, prefill_attn_pairs=151_525), 0.011)]
    for load, expected_s in cases:
        assert step_time_s(extra, load) - step_time_s(plain, load) == pytest.approx(expected_s, rel=1e-9)
    assert step_time_s(extra, InstanceLoad(0, 0)) == step_time_s(plain, InstanceLoad(0, 0))


def test_profile_measures_the_overhead_through_the_real_engine(tmp_path):
    clock = "cpu"  # `repro profile --quick` in test_calibration_cli covers the wall clock
    torch.set_num_threads(1)
    plan = ProfilePlan(tokens=(1, 8), kv_lens=(64, 128), copy_bytes=(4096, 65536), prefill_tokens=16, repeats=2,
                       overhead_batches=(1, 4), overhead_prefill_seqs=(1, 2), overhead_prompt_len=8,
                       overhead_context_tokens=8, clock=clock)
    doc = coefficients.validate(profile(model_spec("llama-tiny"), name="cpu", device=torch.device("cpu"),
                                        dtype=torch.float32, quick=True, seed=0, plan=plan), "profile")
    assert doc["profile"]["clock"] == clock
    entry = doc["hardware"]["cpu"]["step_overhead_s"]["llama-tiny"]
    for kind, xs in (("decode", [1, 4]), ("prefill", [8, 16])):
        part = entry[kind]
        assert part["x"] == xs and all(y > 0 for y in part["y"])
        # the step contains the forward pass: what is outside it (LM head, sampling, scheduling) takes time
        assert len(part["outside_forward_s"]) == len(xs) and all(v > 0 for v in part["outside_forward_s"])
        assert len(part["in_layers_s"]) == len(xs)
    path = tmp_path / "cpu.json"
    path.write_text(json.dumps(doc))
    model = CalibratedPerfModel.for_setting(model="llama-tiny", gpu="cpu", coefficients_path=path)
    assert model.step_overhead is not None
    assert step_time_s(model, InstanceLoad(4, 64)) > model.num_layers * model.non_attention(4)


def test_the_overhead_curve_follows_a_step_a_straight_line_misses():
    """On a CPU the LM head's matrix product takes about twice as long from 4 rows as at 3 (the BLAS changes kernel):
    the overhead curve keeps a knot wherever a line between the neighbours misses a median by more than 5%."""
    from reference_impl.calibration.curve import Curve
    from reference_impl.calibration.overhead import MAX_REL_ERR, median_curve_entry

    batches = [1, 2, 3, 4, 5, 6, 8, 16, 32]
    cost_s = {b: (0.012 if b < 4 else 0.019) + 0.0003 * b for b in batches}
    rows = [(b, cost_s[b] * f) for b in batches for f in (0.9, 1.0, 1.1)]  # the median is the middle one
    entry = median_curve_entry([x for x, _ in rows], [y for _, y in rows], "test")
    curve = Curve.from_json(entry)
    for b in batches:
        assert curve(b) == pytest.approx(cost_s[b], rel=MAX_REL_ERR)
    line = Curve((1, 32), (cost_s[1], cost_s[32]))  # what a straight line through the ends would say
    assert line(4) < 0.8 * cost_s[4]
    assert entry["at_x"] == batches and entry["max_rel_err"] <= MAX_REL_ERR
