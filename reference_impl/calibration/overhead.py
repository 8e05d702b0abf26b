"""What the engine spends per step beyond the cost model's layer terms (scheduling, LM head, sampling, Python, and
what its real layers cost beyond the profiled ops), as measured by `repro profile` on the machine at hand
(calibration/profile_overhead.py; the calibration file's key `step_overhead_s.<model>`). The A100/H100 fits have
none: zero there.
"""
from dataclasses import dataclass

import numpy as np

from reference_impl.calibration.curve import Curve, fit_curve
from reference_impl.calibration.fit import curve_entry
from reference_impl.calibration.perf_model import InstanceLoad

MIN_OVERHEAD_S = 1e-7  # a curve needs positive values; an engine faster than the layer terms gets ~0
MAX_REL_ERR = 0.05  # of the overhead curve against the medians it is drawn through


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


def median_curve_entry(xs, ys, source: str) -> dict:
    """The median y at each x, floored at MIN_OVERHEAD_S, as a curve with a knot wherever a line between the
    neighbours misses a median by more than MAX_REL_ERR. Not one straight line: on a CPU the LM head's matrix
    product takes twice as long from 4 rows as at 3 (the BLAS picks another kernel), and with another engine's
    layer terms the remainder is not linear either (vLLM's long prefill steps take less than the op-level terms,
    its short ones more)."""
    ux = sorted(set(xs))
    med = [float(np.median([y for x, y in zip(xs, ys) if x == u])) for u in ux]
    floored = np.maximum(med, MIN_OVERHEAD_S)
    curve = fit_curve(ux, floored, max_rel_err=MAX_REL_ERR)
    return {**curve_entry(curve, ux, floored, source), "at_x": [int(x) for x in ux],
            "step_minus_layers_s": [float(f"{v:.6g}") for v in med]}
