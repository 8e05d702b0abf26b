"""Whole-request moves between instance actors: control/request_move.py's move across processes, asked for by a
design's move rule (its `after_step(moves)`, given to the engine's constructor; prefill/decode disaggregation's
hand-over after prefill, systems/pd_disagg/hand_over.py).

The source, the request's home, on its loop thread in the control phase (`Mover.move`): the destination gives it
blocks (`TakeForMove`, refused when its rBlocks or its batch have no room: its running requests and those on their
way there), the request leaves the source's batch, and its KV is copied block for block in this step's exchange
over the data plane (the KV-move path of exchange.py: the source's blocks are staged before the step writes
anything, so they are freed at once); the Sequence travels in the destination's part of the step
(`PartnerWork.adopt`). The destination's serving thread posts `Adopt` once the step's KV has landed there, and its
loop adopts the request at its next control phase (`RManager.adopt_moved`, `Scheduler.adopt`) and reports its
tokens from then on (all of them the first time), which is how the driver learns the new home. An abort that reaches
the old home is forwarded there.
"""
import time

from reference_impl.backends.ray.messages import Adopt
from reference_impl.backends.ray.migration import Migrations
from reference_impl.backends.ray.owned import Owned
from reference_impl.control.request_move import source_refusal
from reference_impl.control.protocol import InstanceStatus
from reference_impl.control.rblock import RBlock
from reference_impl.control.sequence import Sequence, Status

MAX_FORWARDS = 4096  # moved requests whose new home an old home remembers (for an abort that comes late)


class Mover(Owned):
    """One instance loop's side of whole-request moves, out and in (RequestMoves for the design's rule)."""

    def __init__(self, loop, rule=None):
        self.loop, self.rule = loop, rule
        self.incoming: set[int] = set()  # requests given blocks here to move in, not adopted yet
        self.aborted: set[int] = set()  # ... of them, aborted before they landed
        self.moved_to: dict[int, int] = {}  # requests moved out -> their new home
        self.unreported: set[int] = set()  # requests adopted here whose tokens this loop has not reported yet
        self.migrations = Migrations(self)
        self.next_round_s = 0.0  # when `due` next says yes

    def claim(self) -> None:
        super().claim()
        self.migrations.claim()

    # --- RequestMoves, for the rule
    @property
    def instance(self):
        return self.loop.instance

    def rooms(self, inst_ids) -> list[tuple[int, int, int]]:
        peers = self.loop.rm.peers
        rooms = [peers[i].room_for_move() for i in inst_ids if i in peers and i != self.loop.inst_id]
        return [r for r in rooms if r is not None]  # (a dead peer has none)

    def statuses(self, inst_ids) -> list[InstanceStatus]:
        peers, me = self.loop.rm.peers, self.loop.inst_id
        statuses = [self.loop.instance.status() if i == me else peers[i].status() for i in inst_ids if i in peers]
        return [s for s in statuses if s is not None]  # (a dead peer has none)

    def due(self, period_s: float) -> bool:
        now = time.monotonic()
        if now < self.next_round_s:
            return False
        self.next_round_s = now + period_s
        return True

    @property
    def migrating(self) -> set[int]:
        return set(self.migrations.active)

    def move(self, seq: Sequence, dst: int) -> bool:
        return self.finish(seq, dst, [])

    def migrate(self, seq: Sequence, dst: int, last_stage_blocks: int, max_stages: int) -> bool:
        """Start a live migration of `seq` to `dst` (migration.py): pre-copy stages while it decodes here, then the
        pause and the move. False when it cannot leave now or migrates already."""
        return self.migrations.start(seq, dst, last_stage_blocks, max_stages)

    # --- the moves themselves
    def take(self, seq: Sequence, dst: int, num_blocks: int) -> list[RBlock]:
        """`num_blocks` blocks on `dst` for `seq` (none: refused there, counted)."""
        blocks = self.loop.rm.peers[dst].take_for_move(seq.req_id, num_blocks)
        if len(blocks) != num_blocks:
            self.loop.stats.num_moves_declined += 1
            return []
        return blocks

    def finish(self, seq: Sequence, dst: int, copied: list[RBlock]) -> bool:
        """Move `seq` whole to `dst`, whose blocks `copied` hold a copy of its first rBlocks already (a migration's
        pre-copy stages): the rest copied in this step, `seq` out of this batch and adopted there once it landed."""
        loop = self.loop
        rm, req_id = loop.rm, seq.req_id
        if dst == loop.inst_id or dst not in rm.peers or source_refusal(loop.instance, seq) is not None:
            return False
        table = rm.tables[req_id]
        rest = self.take(seq, dst, len(table) - len(copied))
        if not rest and len(copied) < len(table):
            return False
        loop.exchange.copy_blocks(list(zip(table[len(copied):], rest)))
        loop.exchange.adoptions.setdefault(dst, []).append(Adopt(seq, copied + rest))
        if seq in loop.scheduler.running:
            loop.scheduler.remove_running(seq)
        rm.free_request(req_id)
        self.moved_to[req_id] = dst
        if len(self.moved_to) > MAX_FORWARDS:
            del self.moved_to[next(iter(self.moved_to))]
        loop.stats.num_requests_moved += 1
        return True

    # --- the loop's
    def after_step(self) -> None:
        """The design's rule, then a stage of every migration out of here."""
        if self.rule is not None:
            self.rule.after_step(self)
        self.migrations.advance()

    def forward_abort(self, req_id: int) -> bool:
        """An abort of a request moved away goes to its new home; False when it did not move from here."""
        dst = self.moved_to.pop(req_id, None)
        if dst is None or dst not in self.loop.handles:
            return False
        self.loop.handles[dst].abort.remote(req_id)
        return True

    def abort_incoming(self, req_id: int) -> bool:
        if req_id in self.incoming:
            self.aborted.add(req_id)
            return True
        return False

    # --- the destination's side (peer messages, then the Adopt its serving thread posts)
    def room(self) -> tuple[int, int, int]:
        loop = self.loop
        return loop.inst_id, loop.rm.num_free, len(loop.scheduler.running) + len(self.incoming)

    def take_for_move(self, req_id: int, num_blocks: int, home: int, ids: list[int]) -> list[RBlock]:
        loop, rm = self.loop, self.loop.rm
        s = loop.scheduler
        if len(s.running) + len(self.incoming - {req_id}) >= s.max_batch_size \
                or num_blocks > rm.num_free + rm.num_reserved_for(req_id):
            return []
        rm.note_home(req_id, home)
        rm.peers[home]._ids = iter(ids)
        blocks = rm.take_for_move(req_id, num_blocks)
        if blocks:
            self.incoming.add(req_id)
        return blocks

    def drop_incoming(self, req_id: int, blocks: list[RBlock]) -> None:
        """A migration here was aborted: the blocks its stages filled are free again."""
        self.incoming.discard(req_id)
        if blocks:
            self.loop.rm.release_blocks(blocks)

    def adopt(self, msg: Adopt) -> None:
        loop, req_id = self.loop, msg.seq.req_id
        self.incoming.discard(req_id)
        self.moved_to.pop(req_id, None)  # (home here again)
        if req_id in self.aborted:  # the client went away while it moved
            self.aborted.discard(req_id)
            loop.rm.release_blocks(msg.blocks)
            return
        loop.rm.adopt_moved(req_id, msg.blocks)
        msg.seq.status = Status.RUNNING
        loop.scheduler.adopt(msg.seq)
        loop.stats.num_adopted += 1
        self.unreported.add(req_id)

    def reported(self, seq: Sequence) -> int:
        """How many of `seq`'s tokens the driver has from this loop (its report of a step sends the rest): none
        the first time for a request adopted here, so the driver's copy is whole whichever home it hears first."""
        if seq.req_id in self.unreported:
            self.unreported.discard(seq.req_id)
            return 0
        return len(seq.output_ids)

