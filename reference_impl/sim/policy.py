"""A design's decisions in a simulated run, made on the shared control plane: the hooks a design overrides
(reference_impl/systems/design.py). The base class is Infinite-LLM's and its baselines': dispatch to the instance
with the most free memory (Engine.add_request) after the capacity check (EngineConfig.check_fits), the gManager's
rounds by time when pooling is on, and no events of its own.

A policy is built first, from the config and the run's `Cluster` (what it reads and the actions it takes, not the
Simulator); it gives its hooks to the backend's constructor (`step_hooks`: StepHooks) and the engine's
(`placement`: control/placement.py); nothing is patched onto a built object."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from reference_impl.control.placement import Placement
from reference_impl.control.sequence import Sequence

if TYPE_CHECKING:
    from reference_impl.sim.config import SimConfig
    from reference_impl.sim.events import Event
    from reference_impl.sim.simulator import Simulator


class Cluster:
    """A simulated run as its design's policy sees it: the config, the control plane (`engine`), the backend that
    prices its steps, the requests' records and the run's result, the clock; the actions: schedule events, wake an
    instance. Built by the Simulator before its backend and engine, which a policy reads once the run is built (its
    constructor reads the config alone)."""

    __slots__ = ("_sim",)

    def __init__(self, sim: Simulator):
        self._sim = sim

    @property
    def config(self) -> SimConfig:
        return self._sim.config

    @property
    def engine(self):
        return self._sim.engine

    @property
    def backend(self):
        return self._sim.backend

    @property
    def records(self) -> dict:
        return self._sim.records

    @property
    def result(self):
        return self._sim.result

    def now_s(self) -> float:
        """The time of the event being handled."""
        return self._sim.last_s

    @property
    def start_s(self) -> float | None:
        """The time of the run's first event (None before it)."""
        return self._sim.start_s

    def is_busy(self, inst_id: int) -> bool:
        """Whether `inst_id` has a step in flight."""
        return self._sim.busy[inst_id]

    def any_busy(self) -> bool:
        return any(self._sim.busy)

    def schedule(self, events: list[Event]) -> None:
        self._sim.schedule(events)

    def wake(self, inst_id: int, time_s: float) -> list[Event]:
        """A step of `inst_id` at `time_s` when it has work and none in flight (to schedule)."""
        return self._sim.wake(inst_id, time_s)


@dataclass(frozen=True, slots=True)
class StepHooks:
    """What a design's policy asks of its backend's steps (None: nothing); each backend class reads those it knows."""
    before_step: Callable[[int], None] | None = None  # an instance is about to schedule a step
    on_prefilled: Callable | None = None  # (instance, prefilled requests, step duration s) as the step starts
    on_preempted: Callable[[Sequence], None] | None = None  # a step preempted the request (its KV freed)
    on_room: Callable[[], None] | None = None  # a step freed room
    cluster: Cluster | None = None  # the run, for a backend that reads other instances or the clock


class Policy:
    """One run's design policy on `cluster` (sim/policy.py's Cluster). Subclasses keep their own state here, owned by
    the run's one thread."""

    def __init__(self, config: SimConfig, cluster: Cluster):
        self.config, self.cluster = config, cluster

    def step_hooks(self) -> StepHooks:
        """The hooks the backend's constructor takes."""
        return StepHooks()

    def placement(self) -> Placement:
        """The engine's placement rules (control/placement.py; default: the engine's own)."""
        return Placement()

    @property
    def runs_gmanager(self) -> bool:
        """Whether the gManager's rounds (heartbeats, recalls, Algorithm 1, DGFM) run every gmanager_interval_s."""
        return self.config.engine.runs_gmanager_rounds

    def start(self) -> list[Event]:
        """The design's own first events (e.g. a periodic round), scheduled as the run begins."""
        return []

    def dispatch(self, seq: Sequence) -> int | None:
        """The instance a new request joins (None: rejected, the cluster cannot hold it)."""
        engine = self.cluster.engine
        return engine.add_request(seq) if engine.config.fits(seq) else None

    def finish(self) -> None:
        """The run ended: copy the design's own counters onto the run's result (ServingRun.design_counters)."""
