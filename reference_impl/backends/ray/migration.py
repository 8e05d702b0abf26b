"""Live migration of a running request between instance actors (Llumnix's, as systems/llumnix/local.py runs it on the
local engine), on the source's loop thread, one stage per step of the source (`advance`, at its control phase):

- a pre-copy stage takes blocks on the destination for the rBlocks written since the last stage but the one being
  written, and copies them in this step over the data plane while the request keeps decoding here (KV is append-only:
  a copied rBlock stays valid);
- once at most `last_stage_blocks` are left, the pause: the request leaves this batch and moves whole
  (request_moves.py `Mover.finish`), only the rest copied, and the destination adopts it once that step landed;
- the handshake: a request that finished or was preempted here, a destination short of room in its rBlocks or its
  batch, or more than `max_stages` stages abort the migration, and the blocks its stages filled there are freed.
"""
from dataclasses import dataclass, field

from reference_impl.backends.ray.owned import Owned
from reference_impl.control.rblock import RBlock
from reference_impl.control.request_move import source_refusal
from reference_impl.control.sequence import Sequence, Status


@dataclass(slots=True, eq=False)
class Migration:
    seq: Sequence
    dst: int
    num_preemptions: int  # the request's at the start: a preemption since aborts the migration
    last_stage_blocks: int
    max_stages: int
    copied: list[RBlock] = field(default_factory=list)  # the destination's blocks the stages filled, in table order
    num_stages: int = 0


class Migrations(Owned):
    """The migrations out of one instance loop (its Mover's)."""

    def __init__(self, mover):
        self.mover = mover
        self.active: dict[int, Migration] = {}

    def start(self, seq: Sequence, dst: int, last_stage_blocks: int, max_stages: int) -> bool:
        loop = self.mover.loop
        if seq.req_id in self.active or dst == loop.inst_id or dst not in loop.rm.peers \
                or source_refusal(loop.instance, seq) is not None:
            return False
        self.active[seq.req_id] = Migration(seq, dst, seq.num_preemptions, max(1, last_stage_blocks), max_stages)
        loop.stats.num_migrations_started += 1
        return True

    def advance(self) -> None:
        for m in list(self.active.values()):
            self._stage(m)

    def _stage(self, m: Migration) -> None:
        loop, seq = self.mover.loop, m.seq
        if seq.status is not Status.RUNNING or seq.num_preemptions != m.num_preemptions \
                or seq not in loop.scheduler.running:
            return self._abort(m)
        if m.num_stages >= m.max_stages:
            return self._abort(m)
        table = loop.rm.tables[seq.req_id]
        left = len(table) - len(m.copied)
        m.num_stages += 1
        if left <= m.last_stage_blocks:  # the pause
            if not self.mover.finish(seq, m.dst, m.copied):
                return self._abort(m)
            del self.active[seq.req_id]
            loop.stats.num_migrations_completed += 1
            return
        blocks = self.mover.take(seq, m.dst, left - 1)  # (all but the rBlock being written)
        if not blocks:
            return self._abort(m)
        loop.exchange.copy_blocks(list(zip(table[len(m.copied):len(m.copied) + left - 1], blocks)))
        m.copied += blocks
        loop.stats.num_precopy_stages += 1

    def _abort(self, m: Migration) -> None:
        loop = self.mover.loop
        del self.active[m.seq.req_id]
        loop.stats.num_migrations_aborted += 1
        loop.rm.peers[m.dst].drop_incoming(m.seq.req_id, m.copied)
