"""What a serving design is, for every backend: the cluster it makes of a base config (its instances, their
parallelism, pooling) and, in the simulator, the policy that makes its decisions (dispatch, placement, its own
events: sim/policy.py) and the backend that prices its steps (sim/backend.py). Infinite-LLM and its baselines use
the default policy and backend; the other designs (catalog.py) override them in a module of their own."""
from dataclasses import dataclass, replace
from typing import Callable

from reference_impl.control.engine_config import EngineConfig
from reference_impl.control.engine_run import EngineRun
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
    # the real backends that run its mechanism on the real model and KV (the simulator runs every design): "local"
    # (backends/local.py, with the design's own entry point where it has one: systems/*/local.py) and "ray" (the
    # Ray backend, from `engine_run`: backends/ray/serving.py)
    real_backends: tuple[str, ...] = ("local", "ray")
    # its run on a real engine: (the engine config its cluster makes, its knobs or None) -> control/engine_run.py's
    # EngineRun (placement, the instances requests go to, its move rule); None: the engine config alone
    on_engine: Callable[[EngineConfig, object], EngineRun] | None = None
    # devices beyond the GPUs that a cluster it made holds, priced as lamina Table 1's memory device (pricing.py)
    memory_devices: Callable[[SimConfig], int] | None = None
    # its knobs fitted to a workload (a request list), where the design fits them per workload (None: it does not)
    workload_knobs: Callable[[list], object] | None = None

    @property
    def on_pooled_engine(self) -> bool:
        """It runs on the pooled engine's own policy and backend: its config alone makes the difference."""
        return self.policy is Policy and self.backend is SimBackend

    def engine_run(self, config: EngineConfig, knobs=None) -> EngineRun:
        """How a real backend runs this design on `config`, the engine config its cluster makes."""
        return EngineRun(config) if self.on_engine is None else self.on_engine(config, knobs)

    def config(self, base: SimConfig) -> SimConfig:
        """`base` as this design runs it, named in its `design` field."""
        return replace(self.configure(base), design=self.name)
