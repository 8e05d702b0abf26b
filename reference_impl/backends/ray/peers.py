"""A peer instance's rManager seen from inside an instance actor, shaped like `RManager` so that the unchanged
control plane (rmanager.py, kv_moves.py, dgfm.py) runs on it. Nothing here reads the peer's state directly:
- what admission and creditor choice read about a peer (`num_lendable`, `num_homed`) is the gManager's last view
  of it (carried back in heartbeat replies), lowered by what this instance reserved there since; a stale view
  only makes a `try_move_kvcache` be refused, and the protocol retries;
- what changes a peer (reservations, blocks, releases, table entries) is a message to the peer's loop thread
  (mailbox.py), numbered per sender so that the peer applies this instance's messages in the order sent. A call
  with a reply waits for it while this loop keeps answering its own mail.

Calls that clean up on a peer (release, cancel a reservation) or ask it for room succeed quietly when the peer
is dead: its blocks are gone with it, and the driver's recovery recomputes the requests that had KV there.
"""
import itertools
import time

import ray
from ray.exceptions import RayActorError

from reference_impl.backends.ray.peer_messages import (AllocForSwap, AskMove, Borrow, CancelReservation,
                                                     DropIncoming, HasTable, NumMoving, PeerMessage, ReleaseBlocks,
                                                     RoomForMove, SetBlock, StatusOf, Table, TakeForMove,
                                                     TakeReserved, TryMoveKVCache)
from reference_impl.control.rblock import RBlock

_DEAD = object()


class RemoteTable:
    """One request's block table on its home actor: a snapshot to read; item assignment writes through."""

    def __init__(self, peer: "RemoteRManager", req_id: int, blocks: list[RBlock]):
        self.peer, self.req_id, self.blocks = peer, req_id, blocks

    def __iter__(self):
        return iter(self.blocks)

    def __len__(self) -> int:
        return len(self.blocks)

    def __getitem__(self, index: int) -> RBlock:
        return self.blocks[index]

    def __setitem__(self, index: int, block: RBlock) -> None:
        self.blocks[index] = block
        self.peer.set_block(self.req_id, index, block)


class RemoteTables:
    def __init__(self, peer: "RemoteRManager"):
        self.peer = peer

    def __contains__(self, req_id: int) -> bool:
        return self.peer.ask(HasTable(req_id), default=False)

    def __getitem__(self, req_id: int) -> RemoteTable:
        blocks = self.peer.ask(Table(req_id), default=None)
        if blocks is None:
            raise KeyError(req_id)
        return RemoteTable(self.peer, req_id, blocks)


class RemoteRManager:
    def __init__(self, inst_id: int, handle, me, wait_ref, stats):
        """me: this instance's RManager (the sender); wait_ref(ref): its loop's way to wait for a reply; stats: its
        loop's LoopStats, where each call with a reply adds to num_peer_calls and peer_call_s."""
        self.inst_id, self.handle, self.me, self.wait_ref = inst_id, handle, me, wait_ref
        self.stats = stats
        self.tables = RemoteTables(self)
        self.seq = itertools.count()
        self.view_lendable = 0  # the gManager's last view of this peer, minus reservations made here since
        self.num_homed = 0  # the gManager's last view of the requests running there (RManager.num_homed)
        self.mirror: dict[int, int] = {}  # req_id -> blocks reserved there for this instance's requests
        self.moving_sources: set[tuple[str, int]] = set()  # (tier, address) there read by this step's moves
        self.deferred_releases: list[RBlock] = []  # released by the peer once it has read them (this step)

    # --- the channel
    def send(self, message: PeerMessage) -> None:
        """`message` to the peer's rManager, no answer awaited."""
        self.handle.rm_post.remote(self.me.inst_id, next(self.seq), message)

    def ask(self, message: PeerMessage, default=_DEAD):
        """`message` to the peer's rManager; wait for its answer (`default` when the peer is dead)."""
        t0 = time.perf_counter()
        try:
            return self.wait_ref(self.handle.rm_call.remote(self.me.inst_id, next(self.seq), message))
        except RayActorError:
            if default is _DEAD:
                raise
            return default
        finally:
            self.stats.num_peer_calls += 1
            self.stats.peer_call_s += time.perf_counter() - t0

    # --- what admission and creditor choice read
    @property
    def num_lendable(self) -> int:
        return self.view_lendable

    # --- reservations and blocks for this instance's requests
    def try_move_kvcache(self, req_id: int, num_blocks: int) -> bool:
        ok = self.ask(TryMoveKVCache(req_id, num_blocks, self.me.inst_id), default=False)
        if ok:
            self.mirror[req_id] = self.mirror.get(req_id, 0) + num_blocks
            self.view_lendable = max(0, self.view_lendable - num_blocks)
        return ok

    def num_reserved_for(self, req_id: int) -> int:
        return self.mirror.get(req_id, 0)

    def take_reserved(self, req_id: int, num_blocks: int = 1) -> list[RBlock]:
        """Blocks from the reservation, with ids from this (home) instance's counter; fewer (none) when the
        peer took its room back meanwhile."""
        blocks = self.ask(TakeReserved(req_id, num_blocks, self.me.inst_id, self._new_ids(num_blocks)), default=[])
        left = self.mirror.get(req_id, 0) - num_blocks
        if left > 0 and len(blocks) == num_blocks:
            self.mirror[req_id] = left
        else:
            self.mirror.pop(req_id, None)
        return blocks

    def borrow(self, req_id: int, num_blocks: int) -> list[RBlock]:
        """A reservation and its blocks in one round trip (rManager.borrow); none when the peer is short."""
        blocks = self.ask(Borrow(req_id, num_blocks, self.me.inst_id, self._new_ids(num_blocks)), default=[])
        self.view_lendable = max(0, self.view_lendable - len(blocks))
        return blocks

    # --- a request of this instance moving there whole (request_moves.py)
    def room_for_move(self) -> tuple[int, int, int] | None:
        return self.ask(RoomForMove(), default=None)

    def take_for_move(self, req_id: int, num_blocks: int) -> list[RBlock]:
        return self.ask(TakeForMove(req_id, num_blocks, self.me.inst_id, self._new_ids(num_blocks)), default=[])

    def status(self):
        return self.ask(StatusOf(), default=None)

    def drop_incoming(self, req_id: int, blocks: list[RBlock]) -> None:
        self.send(DropIncoming(req_id, blocks))

    def _new_ids(self, num_blocks: int) -> list[int]:
        """Block ids from this (home) instance's counter, for blocks the peer allocates."""
        return [next(self.me._ids) for _ in range(num_blocks)]

    def cancel_reservation(self, req_id: int, num_blocks: int | None = None) -> None:
        left = 0 if num_blocks is None else self.mirror.get(req_id, 0) - num_blocks
        if left > 0:
            self.mirror[req_id] = left
        else:
            self.mirror.pop(req_id, None)
        self.send(CancelReservation(req_id, num_blocks))

    def release_blocks(self, blocks: list[RBlock]) -> None:
        now = []
        for block in blocks:
            if (block.device, block.address) in self.moving_sources:
                self.deferred_releases.append(block)  # the peer still has to read it for this step's move
            else:
                now.append(block)
        if now:
            self.send(ReleaseBlocks(now))

    # --- the home side of a request homed there (a creditor reclaiming, a DGFM swap)
    def move_kvcache(self, req_id: int, num_blocks: int, dst_inst: int, src_inst: int | None = None) -> bool:
        return self.ask(AskMove(req_id, num_blocks, dst_inst, src_inst), default=False)

    def num_moving(self, req_id: int, src_inst: int) -> int:
        return self.ask(NumMoving(req_id, src_inst), default=0)

    def set_block(self, req_id: int, index: int, block: RBlock) -> None:
        self.ask(SetBlock(req_id, index, block), default=None)

    def alloc_for_swap(self, req_id: int) -> RBlock:
        return self.ask(AllocForSwap(req_id))
