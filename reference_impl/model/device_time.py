"""A model whose step costs a configured wall time on a device, not CPU: `device-time:20ms`.

It measures what an engine costs around the model (control planes, messaging, waiting for partners) at a given
device step time, beyond the cores at hand: layer i of a step ends (i + 1) * step_s / num_layers after the
step's start, waiting out what the layer's own work left (the loop that runs it may serve its mail meanwhile,
as a CPU thread does while a GPU computes). Tokens come from a small LLaMA run for real with the same
DistAttention calls, so they stay deterministic and comparable with the local backend and transformers; its
CPU work (about 1-2 ms a step here) overlaps the device time, so a step lasts step_s when nothing waits.
"""
import re
import time

from reference_impl.errors import InputError
from reference_impl.model.llama import LlamaModel, ModelConfig, random_model

SMALL = ModelConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_layers=2, num_heads=4, num_kv_heads=2)
SPEC = re.compile(r"device-time:(\d+(?:\.\d+)?)ms")


class DeviceTimeModel:
    """LlamaModel-shaped (`config`, `dtype`, `forward`, `logits`, `to`); `wait(seconds)` passes device time."""

    def __init__(self, step_s: float, inner: LlamaModel | None = None, seed: int = 0):
        if step_s < 0:
            raise InputError(f"device time per step must be >= 0 ms, got {1e3 * step_s:g}")
        self.step_s = step_s
        self.inner = inner if inner is not None else random_model(SMALL, seed)
        self.config = self.inner.config
        self.wait = time.sleep

    @property
    def dtype(self):
        return self.inner.dtype

    def to(self, device) -> "DeviceTimeModel":
        return DeviceTimeModel(self.step_s, self.inner.to(device))

    def forward(self, input_ids, positions, attend):
        per_layer_s = self.step_s / self.config.num_layers
        start_s = time.perf_counter()

        def timed(layer, q, k, v):
            out = attend(layer, q, k, v)
            left_s = start_s + (layer + 1) * per_layer_s - time.perf_counter()
            if left_s > 0:  # the CPU work of the layer so far ran while the device computed
                self.wait(left_s)
            return out

        return self.inner.forward(input_ids, positions, timed)

    def logits(self, hidden):
        return self.inner.logits(hidden)


def parse_device_time(spec: str) -> float | None:
    """Seconds per step of a `device-time:<N>ms` spec; None for any other model spec."""
    if not spec.startswith("device-time"):
        return None
    match = SPEC.fullmatch(spec)
    if not match:
        raise InputError(f"model {spec!r}: write the device time per step as device-time:<N>ms, e.g. device-time:20ms")
    return float(match.group(1)) / 1e3
