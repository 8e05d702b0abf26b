"""The simulator's events (Vidur's shape): each kind handles itself on the simulator and returns the events it
causes. Arrival: the design's dispatch (sim/policy.py; by default the capacity check and the most free memory).
Step: one step of an instance (a KV-move chunk, schedule, the step's cost, postprocess); then a blocked waiting
request may go to an instance that can admit it, and idle instances take waiting work that fits
(Engine.redispatch, Engine.fill_idle). Handoff: what the steps of instances that wait for others would do,
without running them. GManagerRound: heartbeats, recalls, Algorithm 1, DGFM (RoundDecisions: the last three, the
round's latency later)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from reference_impl.control.sequence import Sequence

if TYPE_CHECKING:
    from reference_impl.sim.simulator import Simulator

MAX_IDLE_ROUNDS = 50  # rounds with waiting requests but no instance able to run: the rest is stuck
# Steps that ran no batch and moved no KV at one simulated instant, after which an instance is not woken again at
# that instant. When admission refuses what the fresh pooled room says fits (a request that fits one instance
# borrows only from the gManager's hinted creditors, whose status is a round old), fill_idle would hand it back
# forever without time passing; the next event that frees room, or the next round's heartbeats, wakes it.
# (Fig 10 points see at most 2 such steps at one instant.)
MAX_NOOP_STEPS_PER_INSTANT = 4


class PromptIds:
    """Stands in for a prompt's token list: only its length matters to the scheduler (O(1) memory)."""

    __slots__ = ("n",)

    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n


@dataclass(slots=True)
class Event:
    time_s: float

    def handle(self, sim: Simulator) -> list[Event]:
        raise NotImplementedError


@dataclass(slots=True)
class Arrival(Event):
    request: object  # workloads.Request: req_id, prompt_len, output_len

    def handle(self, sim: Simulator) -> list[Event]:
        r = self.request
        seq = Sequence(r.req_id, PromptIds(r.prompt_len), r.output_len)
        inst_id = sim.policy.dispatch(seq)
        sim.arrived(seq, inst_id)
        return [] if inst_id is None else sim.wake(inst_id, self.time_s)


@dataclass(slots=True)
class Step(Event):
    inst_id: int

    def handle(self, sim: Simulator) -> list[Event]:
        engine, inst_id, now_s = sim.engine, self.inst_id, self.time_s
        inst = engine.instances[inst_id]
        outcome = sim.backend.step(inst, sim.co_running(inst_id) if sim.shares_cores else 0.0)
        duration_s = outcome.duration_s
        ran, is_busy = bool(outcome.seqs), duration_s is not None
        if ran:
            sim.record_step(inst_id, outcome, now_s + duration_s)
        if not (ran and is_busy and sim.computing[inst_id]):  # (else it computed before and computes on)
            sim.stepping(inst_id, is_busy, ran)
        if is_busy:  # its next step: this event, moved on (no one else holds it)
            self.time_s = now_s + duration_s
            caused = [self]
        else:  # no batch, no KV moved (before the hand-offs below may wake it again)
            caused = []
            sim.count_noop_step(inst_id, now_s)
        if inst.scheduler.waiting:  # (only a waiting request is handed on)
            target = engine.redispatch(inst)
            if target is not None:
                caused += sim.handed(target, now_s)
        room_freed = outcome.finished or outcome.num_moved_blocks  # (room freed, as by finished requests)
        if room_freed or not ran:  # idle instances may take waiting work
            for idle in engine.fill_idle():
                caused += sim.handed(idle, None if room_freed else now_s)
            if room_freed:
                caused += sim.wake_all(now_s)
        return caused


@dataclass(slots=True)
class Handoff(Event):
    """What the steps of instances that wait for others would do (Scheduler.waits_for_others): hand their
    first request to an instance that can admit it, and fill idle instances; without running those steps."""
    inst_ids: tuple[int, ...]

    def handle(self, sim: Simulator) -> list[Event]:
        engine, caused = sim.engine, []
        key = (sim.changes.memory, sim.changes.queues, self.inst_ids)
        if sim.quiet_handoff.holds(key):
            return []  # the same instances, nothing changed since a handoff that did nothing
        bound = engine.most_pooled_room()  # (memory does not change in this loop, so neither does the bound)
        for inst_id in self.inst_ids:
            inst = engine.instances[inst_id]
            s = inst.scheduler
            if s.waiting and s.head_blocks > bound:
                continue  # redispatch would refuse it (the common case): skip the checks before it
            if s.waits_for_others and (target := engine.redispatch(inst)) is not None:
                caused += sim.handed(target, self.time_s)
        for idle in engine.fill_idle():
            caused += sim.handed(idle, self.time_s)
        if not caused:
            sim.quiet_handoff.set(key)
        return caused


@dataclass(slots=True)
class GManagerRound(Event):
    """Heartbeats, then the round's decisions: at once, or SimConfig.gmanager_latency_s later (RoundDecisions),
    planned on the heartbeats' views and applied to the state of then, as a round that takes that long would."""

    def handle(self, sim: Simulator) -> list[Event]:
        sim.engine.heartbeats()
        latency_s = sim.config.gmanager_latency_s
        if latency_s:
            return [RoundDecisions(self.time_s + latency_s, self.time_s)]
        return self.decide(sim, self.time_s, self.time_s)

    @classmethod
    def decide(cls, sim: Simulator, now_s: float, round_s: float) -> list[Event]:
        """Recalls, Algorithm 1 and DGFM at `now_s`; the next round one interval after `round_s`."""
        sim.engine.gmanager_round()
        sim.round_done(now_s)
        caused = sim.wake_all(now_s)
        if sim.count_idle_round() < MAX_IDLE_ROUNDS:
            next_s = round_s + sim.config.gmanager_interval_s
            if not caused and sim.may_skip_rounds():
                next_s = cls._skip_empty_rounds(sim, next_s)
            caused.append(GManagerRound(next_s))
        return caused

    @staticmethod
    def _skip_empty_rounds(sim: Simulator, next_s: float) -> float:
        """The cluster holds nothing and only arrivals are queued: until the next arrival every round would
        find the same empty state and do nothing, so it is counted, not run (same times: repeated addition)."""
        arrival_s = sim.next_event_s()
        while next_s < arrival_s:
            sim.round_done(None)
            next_s += sim.config.gmanager_interval_s
        return next_s


@dataclass(slots=True)
class RoundDecisions(Event):
    """A gManager round's decisions, its latency after its heartbeats (at round_s)."""
    round_s: float = 0.0

    def handle(self, sim: Simulator) -> list[Event]:
        return GManagerRound.decide(sim, self.time_s, self.round_s)
