"""Moving a running request whole from one instance to another: its KV re-homed on the destination and its
Sequence moved from the source's batch to the destination's. Llumnix's live migration ends with this move (its
last stage), and a prefill/decode split moves each request once after its prefill.

The move is all or none: it is refused, with nothing changed, unless the request's KV is whole on the source
(no rBlock lent elsewhere, no KV move pending), its prompt is prefilled, and the destination has room in its
batch and rBlocks for all of it (its free rBlocks plus the room it reserved for this request beforehand, with
`RManager.try_move_kvcache`: a caller that copies the KV ahead of the move, in rounds, reserves as it goes).
After it, the request has one home, the destination, with as many rBlocks as before and the same tokens.
"""
from typing import Protocol

from reference_impl.control.instance import Instance
from reference_impl.control.protocol import InstanceStatus
from reference_impl.control.rblock import RBlock
from reference_impl.control.rmanager import CopyBlocks
from reference_impl.control.sequence import Sequence, Status


class MoveRefused(Exception):
    """The move cannot be made now; nothing was changed."""


def refusal(src: Instance, dst: Instance, seq: Sequence) -> str | None:
    """Why `seq` cannot move from `src` to `dst` now (None: it can)."""
    req_id = seq.req_id
    if src is dst:
        return "source and destination are one instance"
    reason = source_refusal(src, seq)
    if reason is not None:
        return reason
    num_blocks = len(src.rm.tables[req_id])
    if req_id in dst.rm.tables:
        return f"request {req_id} is already homed on instance {dst.inst_id}"
    if len(dst.scheduler.running) >= dst.scheduler.max_batch_size:
        return f"instance {dst.inst_id}'s batch is full"
    if num_blocks > dst.rm.num_free + dst.rm.num_reserved_for(req_id):
        return f"instance {dst.inst_id} has no room for request {req_id}'s {num_blocks} rBlocks"
    return None


def source_refusal(src: Instance, seq: Sequence) -> str | None:
    """Why `seq` cannot leave `src` now, wherever it goes (None: it can)."""
    req_id = seq.req_id
    if seq.status is not Status.RUNNING or req_id not in src.rm.tables:
        return f"request {req_id} is not running on instance {src.inst_id}"
    if seq.prefill_left:
        return f"request {req_id} is still prefilling"
    num_blocks = len(src.rm.tables[req_id])
    if src.rm.holders(req_id) != {src.inst_id: num_blocks} or src.rm.num_moving(req_id, src.inst_id) \
            or src.rm.num_moving(req_id, -1):
        return f"request {req_id}'s KV is not whole on instance {src.inst_id}"
    return None


def move_request(src: Instance, dst: Instance, seq: Sequence, copy_blocks: CopyBlocks) -> list[tuple[RBlock, RBlock]]:
    """Re-home running request `seq` from `src` to `dst`: rBlocks on `dst` (the room it reserved for `seq` first),
    the KV copied block for block through `copy_blocks` (reading every source before writing), the source's
    rBlocks freed, and `seq` in `dst`'s batch (it may have left `src`'s batch already: a migration's pause).
    Returns the (source, destination) rBlock pairs copied; raises MoveRefused (nothing changed) when `refusal`
    names a reason."""
    reason = refusal(src, dst, seq)
    if reason is not None:
        raise MoveRefused(reason)
    req_id = seq.req_id
    source_table = src.rm.tables[req_id]
    dst.rm.cancel_reservation(req_id)  # the reserved room is free again, for the allocation below
    admitted = dst.rm.alloc_prompt(req_id, len(source_table))
    assert admitted, "refusal() checked the room"
    pairs = list(zip(source_table, dst.rm.tables[req_id]))
    copy_blocks(pairs)
    src.rm.free_request(req_id)
    if seq in src.scheduler.running:
        src.scheduler.remove_running(seq)
    dst.scheduler.adopt(seq)
    return pairs


class RequestMoves(Protocol):
    """What a design's move rule may read and do on one instance of a backend whose instances run their own loops
    (the Ray backend's `Mover`): the instance it runs on, the room of other instances, and whole moves of this
    instance's running requests. A rule is given to the backend's constructor and asked after every step
    (`rule.after_step(moves)`); it holds no state of its own, so one rule serves every instance."""

    @property
    def instance(self) -> Instance:
        """This instance (its rManager and scheduler): read only."""

    def rooms(self, inst_ids: list[int]) -> list[tuple[int, int, int]]:
        """(inst_id, free rBlocks, requests running there or on their way there) of each instance, asked now."""

    def statuses(self, inst_ids: list[int]) -> list[InstanceStatus]:
        """Each instance's status (its load), asked now."""

    def due(self, period_s: float) -> bool:
        """True at most once every `period_s` seconds on this instance (a rule's rounds)."""

    @property
    def migrating(self) -> set[int]:
        """The requests migrating out of this instance now."""

    def move(self, seq: Sequence, dst: int) -> bool:
        """Move running request `seq` whole to instance `dst`: its Sequence and KV leave this instance with this
        step and `dst` adopts them once its KV landed. False (nothing changed) when `refusal` names a reason here
        or `dst` has no room for it."""

    def migrate(self, seq: Sequence, dst: int, last_stage_blocks: int, max_stages: int) -> bool:
        """Start a live migration of `seq` to `dst`: pre-copy stages while it decodes here, one a step, then the pause
        and the move once at most `last_stage_blocks` are left; aborted past `max_stages` stages, or when the request
        ends or `dst` refuses. False when it cannot start."""
