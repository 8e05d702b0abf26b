"""Llumnix's own events on the simulator (sim/events.py's shape): the periodic pairing round, a pre-copy stage's
copy arriving, and the last stage's copy arriving (the request resumes on the destination)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from reference_impl.sim.events import Event

if TYPE_CHECKING:
    from reference_impl.sim.simulator import Simulator
    from reference_impl.systems.llumnix.migration import Migration


@dataclass(slots=True)
class PairingRound(Event):
    def handle(self, sim: Simulator) -> list[Event]:
        return sim.policy.pairing_round(self.time_s)


@dataclass(slots=True)
class StageCopied(Event):
    migration: Migration

    def handle(self, sim: Simulator) -> list[Event]:
        return sim.policy.migrator.stage_copied(self.migration, self.time_s)


@dataclass(slots=True)
class Resume(Event):
    migration: Migration

    def handle(self, sim: Simulator) -> list[Event]:
        return sim.policy.migrator.resume(self.migration, self.time_s)
