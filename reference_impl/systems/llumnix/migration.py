"""Llumnix's live migration of one running request, on the simulator's clock (arXiv 2406.03243 section 4.2;
AlibabaPAI/llumnix llumnix/llumlet/migration_coordinator.py _migrate_out_multistage / _migrate_out_onestage).

Pre-copy: each stage reserves room on the destination for the rBlocks written since the last stage but the one
being written, and copies them over the link (CalibratedPerfModel.kv_transfer_s) while the request keeps decoding
on the source; its copy overlaps the source's steps and costs them nothing. Once at most `last_stage_max_tokens`
are left, the last stage waits for the source's step boundary, takes the request out of its batch (the pause),
reserves and copies the rest, and the request resumes on the destination (control/request_move.py). A stage
beyond `max_stages` drops the migration. Handshake: the request finished or was preempted (seen at the next stage
boundary), the destination short of room (a reservation refused, or taken back by the destination's own requests:
RManager._reclaim_reservations) or its batch full at the end: the migration is aborted, its reservation released
and a paused request goes back into the source's batch."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from reference_impl.control.request_move import move_request, refusal
from reference_impl.control.sequence import Sequence, Status
from reference_impl.systems.llumnix.events import Resume, StageCopied
from reference_impl.systems.llumnix.freeness import choose_request, pair_instances
from reference_impl.systems.llumnix.knobs import LlumnixKnobs

if TYPE_CHECKING:
    from reference_impl.sim.events import Event
    from reference_impl.sim.policy import Cluster

SRC, DST, STAGES = "src", "dst", "stages"  # why a migration was aborted
ABORT_REASONS = (SRC, DST, STAGES)


@dataclass(slots=True, eq=False)
class Migration:
    seq: Sequence
    src: int
    dst: int
    num_preemptions: int  # the request's at the start: a preemption since aborts the migration
    copied_blocks: int = 0  # rBlocks the finished stages copied
    num_stages: int = 0  # stages begun, the last one included
    stage_blocks: int = 0  # rBlocks the stage in flight copies
    paused_at_s: float | None = None  # when the request left the source's batch (the last stage)


@dataclass(slots=True)
class MigrationCounters:
    started: int = 0
    completed: int = 0
    aborted: Counter = field(default_factory=Counter)  # why -> migrations
    copied_tokens: int = 0  # KV tokens sent over the link, every stage of every migration
    precopy_rounds: int = 0  # stages copied while the request kept decoding
    pause_total_s: float = 0.0
    pause_max_s: float = 0.0


class Migrator:
    """One run's migrations: pairing rounds start them, their events advance them (events.py)."""

    def __init__(self, cluster: Cluster, knobs: LlumnixKnobs):
        self.cluster, self.knobs = cluster, knobs
        self.block_size = cluster.config.engine.block_size
        self.last_stage_blocks = max(1, knobs.last_stage_max_tokens // self.block_size)
        self.active: dict[int, Migration] = {}  # req_id -> its migration
        self.num_busy = [0] * cluster.config.engine.num_instances  # migrations in or out of each instance
        self.pausing: dict[int, list[Migration]] = {}  # source -> migrations waiting for its step boundary
        self.counters = MigrationCounters()
        self._futile_state, self._futile_attempts = None, 0  # (changes) of the last round that changed nothing

    def pair(self, now_s: float) -> list[Event]:
        """A pairing round: migrate one running request from each source to its destination. A round on the state
        of a round that changed nothing (no pair, or every destination refused the first stage's room) would
        choose the same pairs and requests and be refused again: its attempts are counted, not made."""
        changes = self.cluster.engine.changes
        state = (changes.memory, changes.queues)
        if state == self._futile_state:
            self.counters.started += self._futile_attempts
            self.counters.aborted[DST] += self._futile_attempts
            return []
        started, refused = self.counters.started, self.counters.aborted[DST]
        cap = self.knobs.max_migrations_per_instance
        free = [i for i in self.cluster.engine.instances if self.num_busy[i.inst_id] < cap]
        caused = []
        for src, dst in pair_instances(free, self.knobs, self.block_size):
            seq = choose_request(src, self.knobs.request_policy, self.active)
            if seq is not None:
                caused += self.start(seq, src.inst_id, dst.inst_id, now_s)
        attempts = self.counters.started - started
        if not caused and (changes.memory, changes.queues) == state and self.counters.aborted[DST] - refused == attempts:
            self._futile_state, self._futile_attempts = state, attempts
        return caused

    def start(self, seq: Sequence, src: int, dst: int, now_s: float) -> list[Event]:
        m = self.active[seq.req_id] = Migration(seq, src, dst, seq.num_preemptions)
        self.num_busy[src] += 1
        self.num_busy[dst] += 1
        self.counters.started += 1
        return self._next_stage(m, now_s)

    def _next_stage(self, m: Migration, now_s: float) -> list[Event]:
        if self._lost(m):
            return self._abort(m, SRC, now_s)
        if m.num_stages >= self.knobs.max_stages:
            return self._abort(m, STAGES, now_s)
        left = len(self._src(m).rm.tables[m.seq.req_id]) - m.copied_blocks
        if left <= self.last_stage_blocks:
            if self.cluster.is_busy(m.src):  # the pause starts as the source's step in flight ends
                self.pausing.setdefault(m.src, []).append(m)
                return []
            return self.pause(m, now_s)
        if not self._reserve(m, left - 1):  # (all but the rBlock being written)
            return self._abort(m, DST, now_s)
        m.num_stages += 1
        m.stage_blocks = left - 1
        return [StageCopied(now_s + self._copy_s(m.stage_blocks), m)]

    def stage_copied(self, m: Migration, now_s: float) -> list[Event]:
        if self.active.get(m.seq.req_id) is not m:
            return []  # aborted meanwhile
        self._copied(m)
        self.counters.precopy_rounds += 1
        return self._next_stage(m, now_s)

    def at_step_boundary(self, inst_id: int, now_s: float) -> None:
        """The source `inst_id` is about to schedule its next step: the pauses waiting for it begin."""
        for m in self.pausing.pop(inst_id, ()):
            if self.active.get(m.seq.req_id) is m:
                self.cluster.schedule(self.pause(m, now_s))

    def pause(self, m: Migration, now_s: float) -> list[Event]:
        """The last stage: the request leaves the source's batch while the rest of its KV is copied."""
        if self._lost(m):
            return self._abort(m, SRC, now_s)
        m.num_stages += 1
        m.stage_blocks = len(self._src(m).rm.tables[m.seq.req_id]) - m.copied_blocks
        if not self._reserve(m, m.stage_blocks):
            return self._abort(m, DST, now_s)
        self._src(m).scheduler.remove_running(m.seq)
        m.paused_at_s = now_s
        return [Resume(now_s + self._copy_s(m.stage_blocks), m)]

    def resume(self, m: Migration, now_s: float) -> list[Event]:
        """The last stage's copy arrived: the request joins the destination's batch, its KV re-homed there."""
        src, dst = self._src(m), self.cluster.engine.instances[m.dst]
        self._copied(m)
        if refusal(src, dst, m.seq) is not None:
            return self._abort(m, DST, now_s)
        move_request(src, dst, m.seq, lambda pairs: None)  # (the stages' events paid for the copies)
        self.cluster.records[m.seq.req_id].inst_id = m.dst
        pause_s = now_s - m.paused_at_s
        self.counters.pause_total_s += pause_s
        self.counters.pause_max_s = max(self.counters.pause_max_s, pause_s)
        self.counters.completed += 1
        self._end(m)
        return self.cluster.wake(m.dst, now_s) + self.cluster.wake(m.src, now_s)  # (the source has room again)

    def _abort(self, m: Migration, why: str, now_s: float) -> list[Event]:
        self.counters.aborted[why] += 1
        self._end(m)
        if m.paused_at_s is None:
            return []
        self._src(m).scheduler.adopt(m.seq)  # back into the source's batch
        return self.cluster.wake(m.src, now_s)

    def _end(self, m: Migration) -> None:
        dst_rm = self.cluster.engine.instances[m.dst].rm
        if m.seq.req_id not in dst_rm.tables:
            dst_rm.cancel_reservation(m.seq.req_id)
        del self.active[m.seq.req_id]
        self.num_busy[m.src] -= 1
        self.num_busy[m.dst] -= 1

    def _lost(self, m: Migration) -> bool:
        """The request finished or was preempted since the migration began."""
        seq = m.seq
        return (seq.status is not Status.RUNNING or seq.num_preemptions != m.num_preemptions
                or seq.req_id not in self._src(m).rm.tables)

    def _reserve(self, m: Migration, num_blocks: int) -> bool:
        """Room on the destination for `num_blocks` more, the room of the stages before still held."""
        dst_rm = self.cluster.engine.instances[m.dst].rm
        if dst_rm.num_reserved_for(m.seq.req_id) < m.copied_blocks:
            return False  # the destination took room back for its own requests
        return dst_rm.try_move_kvcache(m.seq.req_id, num_blocks)

    def _copied(self, m: Migration) -> None:
        m.copied_blocks += m.stage_blocks
        self.counters.copied_tokens += m.stage_blocks * self.block_size

    def _copy_s(self, num_blocks: int) -> float:
        return self.cluster.backend.model.kv_transfer_s(num_blocks * self.block_size)

    def _src(self, m: Migration):
        return self.cluster.engine.instances[m.src]
