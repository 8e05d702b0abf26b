"""What the engine spends per step beyond the cost model's layer terms (scheduling, LM head, sampling, Python, and
what its real layers cost beyond the profiled ops), as measured by `repro profile` on the machine at hand
(calibration/profile_overhead.py; the calibration file's key `step_overhead_s.<model>`). The A100/H100 fits have
none: zero there.
"""
from dataclasses import dataclass

from reference_impl.calibration.curve import Curve
from reference_impl.perf_model import InstanceLoad


@dataclass(frozen=True, slots=True)
class StepOverhead:
    decode: Curve  # seconds per decode step, over batch size
    prefill: Curve  # seconds per prefill step, over prompt tokens

    @classmethod
    def from_json(cls, doc: dict) -> "StepOverhead":
        return cls(Curve.from_json(doc["decode"]), Curve.from_json(doc["prefill"]))

    def step_s(self, load: InstanceLoad) -> float:
        if load.prefill_tokens:
            return self.prefill(load.prefill_tokens)
        return self.decode(load.batch_size) if load.batch_size else 0.0
