"""The device-time model: a step lasts the configured device time (CPU work overlapped), its tokens are its small
LLaMA's, and a malformed spec is one clear error."""
import time

import pytest

from reference_impl.backends.local import generate
from reference_impl.model.device_time import DeviceTimeModel, parse_device_time
from reference_impl.control.engine import EngineConfig
from reference_impl.errors import InputError

PROMPTS = [[3, 9, 27, 17, 51], [1, 2], list(range(40))]


def test_a_step_lasts_the_device_time_and_the_tokens_are_the_small_models():
    timed, instant = DeviceTimeModel(0.02, seed=4), None
    instant = DeviceTimeModel(0.0, timed.inner)
    config = EngineConfig(1, 32, block_size=4)
    t0 = time.perf_counter()
    slow = generate(timed, PROMPTS, 5, config, ignore_eos=True)
    elapsed_s = time.perf_counter() - t0
    fast = generate(instant, PROMPTS, 5, config, ignore_eos=True)
    direct = generate(timed.inner, PROMPTS, 5, config, ignore_eos=True)
    assert slow.token_ids == fast.token_ids == direct.token_ids
    assert elapsed_s >= 0.02 * slow.num_steps


@pytest.mark.parametrize("spec, step_s", [("device-time:20ms", 0.02), ("device-time:0.5ms", 0.0005), ("tiny", None)])
def test_specs(spec, step_s):
    assert parse_device_time(spec) == step_s


@pytest.mark.parametrize("spec", ["device-time", "device-time:20", "device-time:-3ms", "device-time:fastms"])
def test_malformed_specs_say_how_to_write_one(spec):
    with pytest.raises(InputError, match="device-time:<N>ms"):
        parse_device_time(spec)
