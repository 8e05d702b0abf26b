"""EngineCosts: what a particular engine implementation costs beyond what hardware profiles and datasheets give.

Measured on the Ray engine of the machine at hand by sim-vs-real's pooled arm, which writes them into that
machine's calibration file (repro/experiments/sim_vs_real/calibration.py); the committed A100/H100 calibrations have no engine
and no such entries, so the simulator's default is zero (no cost) and 1 (no slowdown).
"""
from dataclasses import dataclass

from reference_impl.calibration import coefficients
from reference_impl.errors import InputError


@dataclass(frozen=True, slots=True)
class EngineCosts:
    # how long a debtor's step waits for a creditor serving it (all layers, the wall time of the creditor's serving
    # thread beyond waiting for the queries: its core is shared with the creditor's own step)
    served_step_s: float = 0.0
    served_cpu_s: float = 0.0  # what serving one debtor step costs the creditor's core
    peer_call_s: float = 0.0  # one control-plane call on a peer's rManager that waits for the reply (sim/peer_calls.py)
    # a step's compute time while every instance of the machine computes, over its time while the others idle (the
    # instances share the machine's cores and caches); 1 with a GPU each
    co_run_slowdown: float = 1.0

    def __post_init__(self):
        if not (self.served_step_s >= 0 and self.served_cpu_s >= 0 and self.peer_call_s >= 0):
            raise InputError(f"an engine cost must be >= 0 s (got served step {self.served_step_s}, served CPU "
                             f"{self.served_cpu_s}, peer call {self.peer_call_s})")
        if not self.co_run_slowdown > 0:
            raise InputError(f"a co-run slowdown must be > 0 (got {self.co_run_slowdown})")

    @classmethod
    def from_calibration(cls, coefficients_path, gpu: str, model: str) -> "EngineCosts":
        """The costs the calibration at `coefficients_path` (None: the committed one) holds for `model` on `gpu`;
        a cost it lacks is the default, except served_cpu_s, which is then served_step_s."""
        hw, none = coefficients.load(coefficients_path)["hardware"].get(gpu, {}), cls()

        def cost(key: str, default: float) -> float:
            return hw.get(key, {}).get(model, {}).get(engine_cost_field(key), default)
        served_step_s = cost("served_step_s", none.served_step_s)
        return cls(served_step_s=served_step_s, served_cpu_s=cost("served_cpu_s", served_step_s),
                   peer_call_s=cost("peer_call_s", none.peer_call_s),
                   co_run_slowdown=cost("co_run_slowdown", none.co_run_slowdown))


def engine_cost_field(key: str) -> str:
    """Where a calibration file keeps an engine cost's number: "s" for a time, "value" for a ratio."""
    return "s" if key.endswith("_s") else "value"
