"""A design's decisions in a simulated run, made on the shared control plane: the hooks a design overrides
(reference_impl/systems/design.py). The base class is Infinite-LLM's and its baselines': dispatch to the instance
with the most free memory (Engine.add_request) after the capacity check (EngineConfig.check_fits), the gManager's
rounds by time when pooling is on, and no events of its own."""
from __future__ import annotations

from typing import TYPE_CHECKING

from reference_impl.control.sequence import Sequence
from reference_impl.errors import InputError

if TYPE_CHECKING:
    from reference_impl.sim.events import Event
    from reference_impl.sim.simulator import Simulator


class Policy:
    """One run's design policy; `sim` is the run (its engine, backend, records, clock). Subclasses keep their own
    state here, owned by the run's one thread."""

    def __init__(self, sim: Simulator):
        self.sim = sim

    @property
    def runs_gmanager(self) -> bool:
        """Whether the gManager's rounds (heartbeats, recalls, Algorithm 1, DGFM) run every gmanager_interval_s."""
        return self.sim.config.engine.pooling

    def start(self) -> list[Event]:
        """The design's own first events (e.g. a periodic round), scheduled as the run begins."""
        return []

    def dispatch(self, seq: Sequence) -> int | None:
        """The instance a new request joins (None: rejected, the cluster cannot hold it)."""
        engine = self.sim.engine
        try:
            engine.config.check_fits(seq)
        except InputError:
            return None
        return engine.add_request(seq)

    def finish(self) -> None:
        """The run ended: copy the design's own counters onto `sim.result` (ServingRun.design_counters)."""
