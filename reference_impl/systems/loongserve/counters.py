"""What LoongServe's mechanism did in a run, summed as it runs and copied into ServingRun.design_counters."""
from collections import Counter
from dataclasses import dataclass, field

from reference_impl.sim.backend import StepMeter


@dataclass(slots=True)
class LoongServeCounters:
    degrees: Counter = field(default_factory=Counter)  # prefill batches by group size
    ring_hop_bytes: float = 0.0  # KV the rings' hops carried, all GPUs
    remote_exchange_bytes: float = 0.0  # decode queries out and (out, lse) back between masters and holders
    scale_ups: int = 0  # decode steps that placed a request's new KV on an instance not holding it before
    member_wait_s: float = 0.0  # time steps waited for their instance to leave a prefill group

    def as_dict(self, meter: StepMeter, fit_err_mean: float, fit_err_max: float) -> dict[str, float]:
        """The counters, with the share of instance step time in prefill (`meter`: every member's share of a ring
        counted) and the analytic model's fit error."""
        batches = sum(self.degrees.values())
        return {
            "prefill_batches": batches,
            "prefill_degree_mean": sum(k * n for k, n in self.degrees.items()) / batches if batches else 0.0,
            "prefill_degree_max": max(self.degrees, default=0),
            "prefill_multi_instance_frac": sum(n for k, n in self.degrees.items() if k > 1) / batches
            if batches else 0.0,
            "ring_kv_hop_bytes": self.ring_hop_bytes,
            "remote_exchange_bytes": self.remote_exchange_bytes,
            "scale_ups": self.scale_ups,
            "prefill_time_share": meter.prefill_step_s / meter.step_s if meter.step_s else 0.0,
            "member_wait_s": self.member_wait_s,
            "prefill_model_fit_err_mean": fit_err_mean,
            "prefill_model_fit_err_max": fit_err_max,
        }
