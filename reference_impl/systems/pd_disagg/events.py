"""The design's own events: a prefill step's end queues its requests for a decode instance; a transfer's end lands
the request on its decode instance."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from reference_impl.sim.events import Event

if TYPE_CHECKING:
    from reference_impl.sim.simulator import Simulator


@dataclass(slots=True)
class Prefilled(Event):
    src: int
    seqs: list

    def handle(self, sim: Simulator) -> list[Event]:
        return sim.policy.prefilled(self.src, self.seqs, self.time_s)


@dataclass(slots=True)
class KVLanded(Event):
    req_id: int

    def handle(self, sim: Simulator) -> list[Event]:
        return sim.policy.landed(self.req_id, self.time_s)
