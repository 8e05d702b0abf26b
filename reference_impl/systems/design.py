"""What a serving design is, for every backend: the cluster it makes of a base config (its instances, their
parallelism, pooling) and, in the simulator, the policy that makes its decisions (dispatch, placement, its own
events: sim/policy.py) and the backend that prices its steps (sim/backend.py). Infinite-LLM and its baselines use
the default policy and backend; the other designs (catalog.py) override them in a module of their own."""
from dataclasses import dataclass, replace
from typing import Callable

from reference_impl.cluster_config import ClusterConfig
from reference_impl.control.engine_config import EngineConfig
from reference_impl.control.engine_run import EngineRun
from reference_impl.sim.backend import SimBackend
from reference_impl.sim.config import SimConfig
from reference_impl.errors import InputError
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
    # its own options: the frozen dataclass it reads from SimConfig.design_knobs (`repro simulate --knob`; None: none)
    knobs: type | None = None
    # what it chose for a config it made, beyond instances and GPUs: (config, its knobs resolved) -> a JSON-able dict
    chosen: Callable[[SimConfig, object], dict] | None = None
    # its knobs fitted to a workload: (a request list, the knobs given or None) -> knobs, where the design fits them
    # per workload (None: it does not)
    workload_knobs: Callable[[list, object], object] | None = None

    @property
    def on_pooled_engine(self) -> bool:
        """It runs on the pooled engine's own policy and backend: its config alone makes the difference."""
        return self.policy is Policy and self.backend is SimBackend

    def knobs_for(self, requests: list, knobs=None):
        """`knobs` (None: the defaults) with what this design fits to the workload `requests` filled in."""
        return knobs if self.workload_knobs is None else self.workload_knobs(requests, knobs)

    def engine_run(self, config: EngineConfig, knobs=None) -> EngineRun:
        """How a real backend runs this design on `config`, the engine config its cluster makes."""
        return EngineRun(config) if self.on_engine is None else self.on_engine(config, knobs)

    def real_run(self, backend: str, num_instances: int, blocks_per_instance: int, block_size: int, *,
                 max_batch_size: int | None = None, seed: int = 0, knobs=None) -> EngineRun:
        """How real backend `backend` serves this design on `num_instances` instances of `blocks_per_instance`
        rBlocks each (InputError where it does not run it). A design of the pooled engine decides the instances
        and the pooling, and the cluster's rBlocks are shared among the instances it keeps (vLLM-S: one instance
        holds them all); a design with its own real run (`on_engine`) splits the instances given."""
        if backend not in self.real_backends:
            where = " and the ".join(("the simulator", *(f"{b} backend" for b in self.real_backends)))
            raise InputError(f"system {self.name!r} runs on {where} only, not on {backend}")
        batch = {} if max_batch_size is None else {"max_batch_size": max_batch_size}  # None: the engine's default
        if self.on_engine is not None:
            return self.engine_run(EngineConfig(num_instances, blocks_per_instance, block_size=block_size, seed=seed,
                                                **batch), knobs)
        base = ClusterConfig(engine=EngineConfig(num_instances=num_instances, block_size=block_size, seed=seed))
        policy = self.config(base).engine
        blocks = num_instances * blocks_per_instance // policy.num_instances
        return self.engine_run(EngineConfig(policy.num_instances, blocks, block_size=block_size,
                                            pooling=policy.pooling, seed=seed, **batch), knobs)

    def config(self, base: SimConfig) -> SimConfig:
        """`base` as this design runs it, named in its `design` field."""
        return replace(self.configure(base), design=self.name)
