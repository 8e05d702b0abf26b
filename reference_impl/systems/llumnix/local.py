"""Llumnix's live migration run for real on the local engine (real model, real KV caches), stepped at the engine's
step boundaries (`after_step` is Engine.run's on_step): the simulated Migrator's stages (migration.py) with real
copies. Each pre-copy stage reserves room on the destination and reads the source's rBlocks written since the last
stage but the one being written (KV is append-only: what a stage read stays valid while the request keeps decoding
on the source); once at most `last_stage_max_tokens` are left, the pause takes the request out of the source's
batch, reads the rest, and the request moves whole to the destination (control/request_move.py), its destination
rBlocks written from what the stages read. The handshake is the simulated one: a request that finished or was
preempted, a destination short of room, or too many stages, aborts the migration with its reservation released.
Which request moves where: `pair` (Llumnix's defrag pairing and request policy, freeness.py), or `start`."""
import time
from dataclasses import dataclass, field

from reference_impl.control.request_move import move_request, refusal
from reference_impl.control.sequence import Sequence, Status
from reference_impl.systems.llumnix.freeness import choose_request, pair_instances
from reference_impl.systems.llumnix.knobs import LlumnixKnobs
from reference_impl.systems.llumnix.migration import DST, SRC, STAGES, MigrationCounters


@dataclass(slots=True)
class LocalMigration:
    seq: Sequence
    src: int
    dst: int
    num_preemptions: int
    staged: list = field(default_factory=list)  # (k, v) of the source's rBlocks read so far, in table order
    num_stages: int = 0


class LocalMigrator:
    """Migrations between the instances of `engine`, whose backend is a LocalBackend (its per-instance caches)."""

    def __init__(self, engine, knobs: LlumnixKnobs = LlumnixKnobs()):
        self.engine, self.knobs = engine, knobs
        self.block_size = engine.config.block_size
        self.last_stage_blocks = max(1, knobs.last_stage_max_tokens // self.block_size)
        self.active: dict[int, LocalMigration] = {}
        self.counters = MigrationCounters()

    def start(self, seq: Sequence, src: int, dst: int) -> None:
        self.active[seq.req_id] = LocalMigration(seq, src, dst, seq.num_preemptions)
        self.counters.started += 1

    def pair(self) -> None:
        """Llumnix's pairing round: one request from each source to its destination (instances not migrating)."""
        busy = {i for m in self.active.values() for i in (m.src, m.dst)}
        free = [i for i in self.engine.instances if i.inst_id not in busy]
        for src, dst in pair_instances(free, self.knobs, self.block_size):
            seq = choose_request(src, self.knobs.request_policy, self.active)
            if seq is not None:
                self.start(seq, src.inst_id, dst.inst_id)

    def after_step(self, engine) -> None:
        for m in list(self.active.values()):
            self._advance(m)

    def _advance(self, m: LocalMigration) -> None:
        src = self.engine.instances[m.src]
        seq = m.seq
        if seq.status is not Status.RUNNING or seq.num_preemptions != m.num_preemptions \
                or seq.req_id not in src.rm.tables:
            return self._abort(m, SRC)
        if m.num_stages >= self.knobs.max_stages:
            return self._abort(m, STAGES)
        table = src.rm.tables[seq.req_id]
        left = len(table) - len(m.staged)
        if left <= self.last_stage_blocks:
            return self._pause_and_move(m, table)
        if not self._reserve(m, left - 1):  # (all but the rBlock being written)
            return self._abort(m, DST)
        m.staged += self._read(table[len(m.staged):len(m.staged) + left - 1])
        m.num_stages += 1
        self.counters.precopy_rounds += 1
        self.counters.copied_tokens += (left - 1) * self.block_size

    def _pause_and_move(self, m: LocalMigration, table) -> None:
        src, dst = self.engine.instances[m.src], self.engine.instances[m.dst]
        t0 = time.perf_counter()
        rest = len(table) - len(m.staged)
        if not self._reserve(m, rest):
            return self._abort(m, DST)
        src.scheduler.remove_running(m.seq)  # the pause
        m.staged += self._read(table[len(m.staged):])
        m.num_stages += 1
        self.counters.copied_tokens += rest * self.block_size
        if refusal(src, dst, m.seq) is not None:
            src.scheduler.adopt(m.seq)
            return self._abort(m, DST)
        move_request(src, dst, m.seq, lambda pairs: self._write(m, pairs))
        pause_s = time.perf_counter() - t0
        c = self.counters
        c.completed += 1
        c.pause_total_s += pause_s
        c.pause_max_s = max(c.pause_max_s, pause_s)
        del self.active[m.seq.req_id]

    def _reserve(self, m: LocalMigration, num_blocks: int) -> bool:
        dst_rm = self.engine.instances[m.dst].rm
        if dst_rm.num_reserved_for(m.seq.req_id) < len(m.staged):
            return False  # the destination took room back for its own requests
        return dst_rm.try_move_kvcache(m.seq.req_id, num_blocks)

    def _read(self, blocks) -> list:
        caches = self.engine.backend.caches
        return [(caches[(b.inst_id, b.device)][0][:, b.address].clone(),
                 caches[(b.inst_id, b.device)][1][:, b.address].clone()) for b in blocks]

    def _write(self, m: LocalMigration, pairs) -> None:
        """request_move's copy: the destination's rBlocks from what the stages read (not the source now)."""
        assert len(pairs) == len(m.staged), "every rBlock of the request was read by a stage"
        caches = self.engine.backend.caches
        for (_, dst), (k, v) in zip(pairs, m.staged):
            k_cache, v_cache = caches[(dst.inst_id, dst.device)]
            k_cache[:, dst.address] = k
            v_cache[:, dst.address] = v

    def _abort(self, m: LocalMigration, why: str) -> None:
        self.counters.aborted[why] += 1
        dst_rm = self.engine.instances[m.dst].rm
        if m.seq.req_id not in dst_rm.tables:
            dst_rm.cancel_reservation(m.seq.req_id)
        del self.active[m.seq.req_id]
