"""What a serving design is, for every backend: the cluster it makes of a base config (its instances, their
parallelism, pooling) and, in the simulator, the policy that makes its decisions (dispatch, placement, its own
events: sim/policy.py) and the backend that prices its steps (sim/backend.py). Infinite-LLM and its baselines use
the default policy and backend; the other designs (catalog.py) override them in a module of their own."""
from dataclasses import dataclass, replace
from typing import Callable

from reference_impl.sim.backend import SimBackend
from reference_impl.sim.config import SimConfig
from reference_impl.sim.policy import Policy


@dataclass(frozen=True)
class Design:
    name: str
    summary: str  # one line: the mechanism, for listings
    configure: Callable[[SimConfig], SimConfig]  # the cluster this design makes of a base cluster (same GPUs)
    policy: type[Policy] = Policy
    backend: type[SimBackend] = SimBackend
    real_engine: bool = True  # the engine's local and Ray backends run it too (policy = the config alone)
    # devices beyond the GPUs that a cluster it made holds, priced as lamina Table 1's memory device (pricing.py)
    memory_devices: Callable[[SimConfig], int] | None = None
    # its knobs fitted to a workload (a request list), where the design fits them per workload (None: it does not)
    workload_knobs: Callable[[list], object] | None = None

    @property
    def on_pooled_engine(self) -> bool:
        """It runs on the pooled engine's own policy and backend: its config alone makes the difference."""
        return self.policy is Policy and self.backend is SimBackend

    def config(self, base: SimConfig) -> SimConfig:
        """`base` as this design runs it, named in its `design` field."""
        return replace(self.configure(base), design=self.name)
