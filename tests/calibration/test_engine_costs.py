"""The A100/H100 cost model holds only what profiles and datasheets give; what an engine implementation costs
(EngineCosts) is apart, neutral unless a calibration measured it, and what the simulator charges."""
import json
from dataclasses import fields

import pytest

from reference_impl.calibration import coefficients
from reference_impl.calibration.engine_costs import EngineCosts
from reference_impl.calibration.model import CalibratedPerfModel
from reference_impl.calibration.specs import gpu_names
from reference_impl.errors import InputError
from reference_impl.sim.backend import SimBackend
from reference_impl.sim.config import SimConfig, engine_costs


def test_the_hardware_model_has_no_engine_cost():
    assert not {f.name for f in fields(CalibratedPerfModel)} & {f.name for f in fields(EngineCosts)}


def test_the_committed_calibrations_cost_nothing_beyond_the_hardware():
    doc = coefficients.load()
    for gpu in gpu_names():
        for model in doc["hardware"][gpu]["non_attention_s"]:
            assert EngineCosts.from_calibration(None, gpu, model) == EngineCosts()
    assert SimBackend(SimConfig(), {}).costs == EngineCosts()


def test_measured_costs_come_from_the_calibration_and_a_config_overrides_them(tmp_path):
    doc = json.loads(coefficients.DEFAULT_PATH.read_text())
    gpu, model = "A100-80GB-SXM", "llama2-7b"
    doc["hardware"][gpu]["served_step_s"] = {model: {"s": 0.02, "source": "test"}}
    doc["hardware"][gpu]["co_run_slowdown"] = {model: {"value": 1.5, "source": "test"}}
    path = tmp_path / "measured.json"
    path.write_text(json.dumps(doc))
    measured = SimConfig(model=model, gpu=gpu, coefficients_path=str(path))
    # served_cpu_s absent: a creditor's core pays what the debtor waits
    assert engine_costs(measured) == EngineCosts(served_step_s=0.02, served_cpu_s=0.02, co_run_slowdown=1.5)
    assert EngineCosts.from_calibration(path, gpu, "llama2-13b") == EngineCosts()  # measured for another model
    given = EngineCosts(peer_call_s=0.003)
    assert SimBackend(SimConfig(model=model, gpu=gpu, coefficients_path=str(path), engine_costs=given), {}).costs \
        == given


@pytest.mark.parametrize("bad", [dict(peer_call_s=-1.0), dict(served_step_s=float("nan")), dict(co_run_slowdown=0)])
def test_bad_costs_are_one_line_errors(bad):
    with pytest.raises(InputError):
        EngineCosts(**bad)
