"""Guard 1 can fail: a 10% change to one calibration coefficient (the A100's decode KV read bandwidth) moves the
reproduced numbers, and the message names them, the figures they feed and the command that re-blesses."""
import copy

import pytest

from reference_impl.calibration import coefficients
from reference_impl.sim import config as sim_config
from repro.regression.cases import BY_NAME
from repro.regression.reference import BLESS_COMMAND, check_case, compare, load_reference, moved_message

pytestmark = pytest.mark.regression
CHEAP = ("context-length", "perf-model", "dgfm")  # seconds each; the serving cases read the same cost model


@pytest.fixture
def kv_read_10_percent_faster(tmp_path, monkeypatch):
    doc = copy.deepcopy(coefficients.load())
    doc["hardware"]["A100-80GB-SXM"]["attention"]["kv_read_bytes_per_s"] *= 1.1
    path = tmp_path / "mutated.json"
    path.write_text(coefficients.dumps(doc))
    monkeypatch.setattr(coefficients, "DEFAULT_PATH", path)
    monkeypatch.setattr(sim_config, "_MODELS", {})  # cost models built from the committed file


@pytest.mark.parametrize("name", CHEAP)
def test_a_10_percent_calibration_change_fails_the_guard(kv_read_10_percent_faster, name):
    moved, num_compared = check_case(BY_NAME[name], load_reference())
    assert moved, f"{name}: no number moved with a 10% faster KV read"
    message = moved_message(moved, num_compared)
    assert f"re-bless with `{BLESS_COMMAND}`" in message and BY_NAME[name].feeds in message
    assert f"make {BY_NAME[name].make_target}" in message


def test_float_noise_passes_and_a_tiny_real_change_does_not():
    reference = {"a": 1000.0, "b": None, "c": 3}
    assert compare("x", reference, {"a": 1000.0 * (1 + 1e-12), "b": None, "c": 3}) == []
    moved = compare("x", reference, {"a": 1000.0 * (1 + 1e-6), "b": 2.0, "d": 1.0})
    assert [(m.key, m.is_new, m.is_gone) for m in moved] == [("a", False, False), ("b", False, False),
                                                              ("c", False, True), ("d", True, False)]
    assert "+0.00%" in moved[0].describe() and "new number" in moved[3].describe()
