"""What one instance asks of a peer's rManager (peers.py sends them; the peer's loop thread carries each out on its
PeerRequests, actor.py): one typed message per call, in place of a method named by a string. A peer is always the
request's home or a creditor of it; `home` names the asking home where the peer must note it."""
from dataclasses import dataclass

from reference_impl.control.rblock import RBlock


class PeerMessage:
    __slots__ = ()

    def apply(self, on):
        """Carry the message out on the receiver's PeerRequests `on`; its answer (None for a notice)."""
        raise NotImplementedError


@dataclass(frozen=True, slots=True)
class TryMoveKVCache(PeerMessage):
    req_id: int
    num_blocks: int
    home: int

    def apply(self, on) -> bool:
        return on.try_move_kvcache(self.req_id, self.num_blocks, self.home)


@dataclass(frozen=True, slots=True)
class TakeReserved(PeerMessage):
    req_id: int
    num_blocks: int
    home: int
    ids: list[int]

    def apply(self, on) -> list[RBlock]:
        return on.take_reserved(self.req_id, self.num_blocks, self.home, self.ids)


@dataclass(frozen=True, slots=True)
class Borrow(PeerMessage):
    req_id: int
    num_blocks: int
    home: int
    ids: list[int]

    def apply(self, on) -> list[RBlock]:
        return on.borrow(self.req_id, self.num_blocks, self.home, self.ids)


@dataclass(frozen=True, slots=True)
class CancelReservation(PeerMessage):
    req_id: int
    num_blocks: int | None

    def apply(self, on) -> None:
        on.cancel_reservation(self.req_id, self.num_blocks)


@dataclass(frozen=True, slots=True)
class ReleaseBlocks(PeerMessage):
    blocks: list[RBlock]

    def apply(self, on) -> None:
        on.release_blocks(self.blocks)


@dataclass(frozen=True, slots=True)
class AskMove(PeerMessage):
    """A creditor reclaiming what it lent asks the home to move it (infinite-llm 5.2)."""
    req_id: int
    num_blocks: int
    dst_inst: int
    src_inst: int | None

    def apply(self, on) -> bool:
        return on.move_kvcache(self.req_id, self.num_blocks, self.dst_inst, self.src_inst)


@dataclass(frozen=True, slots=True)
class NumMoving(PeerMessage):
    req_id: int
    src_inst: int

    def apply(self, on) -> int:
        return on.num_moving(self.req_id, self.src_inst)


@dataclass(frozen=True, slots=True)
class SetBlock(PeerMessage):
    req_id: int
    index: int
    block: RBlock

    def apply(self, on) -> None:
        on.set_block(self.req_id, self.index, self.block)


@dataclass(frozen=True, slots=True)
class AllocForSwap(PeerMessage):
    req_id: int

    def apply(self, on) -> RBlock:
        return on.alloc_for_swap(self.req_id)


@dataclass(frozen=True, slots=True)
class HasTable(PeerMessage):
    req_id: int

    def apply(self, on) -> bool:
        return on.has_table(self.req_id)


@dataclass(frozen=True, slots=True)
class Table(PeerMessage):
    req_id: int

    def apply(self, on) -> list[RBlock] | None:
        return on.table(self.req_id)


@dataclass(frozen=True, slots=True)
class RoomForMove(PeerMessage):
    """The receiver's room for a request moving there whole: (inst_id, free rBlocks, requests running there or on
    their way there)."""

    def apply(self, on) -> tuple[int, int, int]:
        return on.room_for_move()


@dataclass(frozen=True, slots=True)
class TakeForMove(PeerMessage):
    """Blocks for home `home`'s request `req_id`, which moves to the receiver whole (none when it has no room in
    its rBlocks or its batch); ids from the home."""
    req_id: int
    num_blocks: int
    home: int
    ids: list[int]

    def apply(self, on) -> list[RBlock]:
        return on.take_for_move(self.req_id, self.num_blocks, self.home, self.ids)


@dataclass(frozen=True, slots=True)
class DropIncoming(PeerMessage):
    """A migration to the receiver was aborted: the blocks its stages filled there are freed."""
    req_id: int
    blocks: list[RBlock]

    def apply(self, on) -> None:
        on.drop_incoming(self.req_id, self.blocks)


@dataclass(frozen=True, slots=True)
class StatusOf(PeerMessage):
    """The receiver's InstanceStatus (its load), for a design's rule."""

    def apply(self, on):
        return on.status()
