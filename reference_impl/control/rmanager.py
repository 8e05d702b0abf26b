"""rManager: one instance's rBlocks (distkv-llm 4.3) and its side of the protocol (infinite-llm 6.2).

For every request homed here it keeps the logical-to-physical table (rBlocks in token order, wherever they
live) and how many of them each instance holds; for every physical block here it knows the owning request.
Remote requests get blocks only through `try_move_kvcache` reservations, first come first served, under a
cap on blocks lent out. With exclusive roles (infinite-llm 5.2) an instance that borrows lends nothing and
one that lends borrows nothing. Admission and borrowing from creditors are in borrowing.py; KV movement, creditor reclaim and debtor
retrieval in kv_moves.py.
Pure Python: the simulator and the local and Ray backends share it.
"""
import itertools
from collections.abc import Callable

from reference_impl.control.borrowing import Borrowing, Recommend
from reference_impl.control.kv_moves import KVMove, KVMoves
from reference_impl.control.memo import Changes, Memo
from reference_impl.control.protocol import Heartbeat, InstanceStatus, RequestPlacementEntry
from reference_impl.control.rblock import BlockPool, RBlock

CopyBlocks = Callable[[list[tuple[RBlock, RBlock]]], None]  # reads every source, then writes every destination

__all__ = ["CopyBlocks", "KVMove", "RManager", "Recommend"]


class RManager(Borrowing, KVMoves):
    def __init__(self, inst_id: int, num_device_blocks: int, num_cpu_blocks: int = 0,
                 max_lent_blocks: int | None = None, peers: dict | None = None, *, exclusive_roles: bool = True,
                 changes: Changes | None = None):
        """`changes`: the change counts every rManager in `peers` shares (the Engine's), which lets what is read
        from the peers be memoised; None: a peer may be in another process (a Ray actor's), so it is read afresh."""
        self.inst_id = inst_id
        self.pool = BlockPool(num_device_blocks, num_cpu_blocks)
        self.max_lent_blocks = self.pool.num_capacity if max_lent_blocks is None else max_lent_blocks
        self.exclusive_roles = exclusive_roles
        self.tables: dict[int, list[RBlock]] = {}  # home requests: rBlocks in token order
        self.holders_by_req: dict[int, dict[int, int]] = {}  # home requests: inst_id -> rBlocks there
        self.num_borrowed = 0  # home requests' rBlocks on other instances
        self.num_home_here = 0  # home requests' rBlocks here
        self.hosted: dict[int, int] = {}  # req_id -> physical blocks here (home or remote request)
        self.reserved: dict[int, int] = {}  # req_id -> blocks promised by try_move_kvcache
        self._remote_reserved_ids: set[int] = set()  # reservations for remote requests (lent room)
        self._num_reserved = self._num_remote_reserved = 0
        self.version = 0  # changes of this rManager (a hot path: counted inline, as are `changes.memory`)
        self.changes = Changes() if changes is None else changes
        self._lendable = Memo()  # num_lendable, per version
        self._peers_lendable = None if changes is None else Memo()  # what the peers may lend, per changes.memory
        self.moves: list[KVMove] = []  # (kv_moves.py)
        self._moves_by_req: dict[int, list[KVMove]] = {}
        self._emptied_reqs: set[int] = set()
        self.frozen: set[int] = set()
        self.peers = {} if peers is None else peers
        self.peers[inst_id] = self
        self._ids = itertools.count(inst_id << 40)
        self._remote_homes: dict[int, int] = {}  # remote requests with blocks here -> their home
        self._changed: set[int] = set()
        self._removed: set[int] = set()

    # --- accounting
    @property
    def num_reserved(self) -> int:
        return self._num_reserved

    # (the reads below are the simulator's hottest: they read the pool's table directly)
    @property
    def num_free(self) -> int:
        return self.pool.num_capacity - len(self.pool.owner) - self._num_reserved

    @property
    def num_lent(self) -> int:
        return len(self.pool.owner) - self.num_home_here

    @property
    def num_lendable(self) -> int:
        # a hot path: every change of its inputs (pool, reservations, counts, moves) moves `version`
        return self._lendable.get(self.version, self._lendable_now)

    def _lendable_now(self) -> int:
        if self.exclusive_roles and self.is_debtor:
            return 0
        num_used = len(self.pool.owner)
        num_free = self.pool.num_capacity - num_used - self._num_reserved
        return max(0, min(num_free, self.max_lent_blocks - (num_used - self.num_home_here) - self._num_remote_reserved))

    @property
    def is_debtor(self) -> bool:
        """Home requests have rBlocks elsewhere, or a move is taking some there."""
        return self.num_borrowed > 0 or self.is_moving_out

    @property
    def is_creditor(self) -> bool:
        """Remote requests have rBlocks here, or room here is promised to one."""
        return len(self.pool.owner) > self.num_home_here or self._num_remote_reserved > 0

    @property
    def can_borrow(self) -> bool:
        return not (self.exclusive_roles and self.is_creditor)

    def note_change(self) -> None:
        """Count a change of this rManager's state (blocks, reservations, counts, moves, entries)."""
        self.version += 1
        self.changes.memory += 1
        self.changes.changed_rms.add(self.inst_id)

    def _reserve(self, req_id: int, num_blocks: int) -> None:
        """Change the reservation of `req_id` by `num_blocks` (negative: give room back)."""
        if req_id not in self.reserved and req_id not in self.tables:
            self._remote_reserved_ids.add(req_id)
        left = self.reserved.get(req_id, 0) + num_blocks
        self.note_change()
        self._num_reserved += num_blocks
        if req_id in self._remote_reserved_ids:
            self._num_remote_reserved += num_blocks
        if left > 0:
            self.reserved[req_id] = left
        else:
            self.reserved.pop(req_id, None)
            self._remote_reserved_ids.discard(req_id)

    @property
    def is_empty(self) -> bool:
        """No request, block, move or reservation here, and nothing left for the next heartbeat to report."""
        return not (self.tables or self.moves or self.reserved or self.pool.num_used or self._changed
                    or self._removed)

    @property
    def num_homed(self) -> int:
        """Requests homed here with KV (the running ones; RemoteRManager: the gManager's last view of the peer's)."""
        return len(self.tables)

    def holders(self, req_id: int) -> dict[int, int]:
        """Which instances hold how much of home request `req_id`: inst_id -> rBlocks."""
        return self.holders_by_req[req_id]

    def entries(self) -> list[RequestPlacementEntry]:
        req_ids = sorted(set(self.tables) | {r for r, n in self.hosted.items() if n})
        return [self._entry(r) for r in req_ids]

    def _entry(self, req_id: int) -> RequestPlacementEntry:
        return RequestPlacementEntry(req_id, self.inst_id, self.hosted.get(req_id, 0), req_id in self.tables)

    def heartbeat(self, status: InstanceStatus, *, full: bool = False) -> Heartbeat:
        """The changed entries since the last heartbeat, or every entry when `full`."""
        if full:
            hb = Heartbeat(status, tuple(self.entries()), (), True)
        elif not (self._changed or self._removed):
            return Heartbeat(status, (), ())
        else:
            hb = Heartbeat(status, tuple(self._entry(r) for r in sorted(self._changed - self._removed)),
                           tuple(sorted(self._removed)))
        self._changed.clear()
        self._removed.clear()
        return hb

    def _touch(self, req_id: int) -> None:
        self.note_change()
        self._changed.add(req_id)
        if req_id in self.tables or self.hosted.get(req_id, 0):
            self._removed.discard(req_id)
        else:
            self._removed.add(req_id)

    # --- physical side
    def _alloc(self, req_id: int) -> RBlock:
        return self._alloc_run(req_id, 1)[0]

    def _alloc_run(self, req_id: int, num_blocks: int) -> list[RBlock]:
        """`num_blocks` physical blocks here for `req_id`, ids from its home's counter (a prompt's run at once)."""
        self.hosted[req_id] = self.hosted.get(req_id, 0) + num_blocks
        self._touch(req_id)
        ids, inst_id = self.peers[self.home_of(req_id)]._ids, self.inst_id
        # (slots first: zip stops at the end of them without drawing one id too many)
        return [RBlock(rblock_id, inst_id, device, address)
                for (device, address), rblock_id in zip(self.pool.alloc(req_id, num_blocks), ids)]

    def home_of(self, req_id: int) -> int:
        """The home instance of a request with blocks here (this one for a home request)."""
        if req_id in self.tables:
            return self.inst_id
        if req_id in self._remote_homes:
            return self._remote_homes[req_id]
        home = self.changes.homes.get(req_id)  # (every peer's requests, where the peers share `changes`)
        if home is None:
            home = next((i for i, rm in self.peers.items() if i != self.inst_id and req_id in rm.tables), None)
        if home is None or home == self.inst_id:
            return self.inst_id
        if self.hosted.get(req_id):
            self._remote_homes[req_id] = home  # known while blocks of it stay here
        return home

    def note_home(self, req_id: int, home: int) -> None:
        """Remember a remote request's home, as the home reserves room here (a peer in another process cannot
        be searched cheaply)."""
        if home != self.inst_id:
            self._remote_homes[req_id] = home

    def release(self, block: RBlock) -> None:
        self.release_blocks([block])

    def release_blocks(self, blocks: list[RBlock]) -> None:
        """Free these physical blocks here (one message from a peer for all of a request's blocks here)."""
        freed: dict[int, int] = {}
        for block in blocks:
            req_id = self.pool.free(block.device, block.address)
            freed[req_id] = freed.get(req_id, 0) + 1
        for req_id, n in freed.items():
            self.hosted[req_id] -= n
            if not self.hosted[req_id]:
                del self.hosted[req_id]
                self._remote_homes.pop(req_id, None)
            self._touch(req_id)

    def try_move_kvcache(self, req_id: int, num_blocks: int) -> bool:
        """Reserve room for `num_blocks` of `req_id`, first come first served; False when short of space."""
        room = self.num_free if req_id in self.tables else self.num_lendable
        if num_blocks <= 0 or num_blocks > room:
            return False
        self._reserve(req_id, num_blocks)
        return True

    def take_reserved(self, req_id: int, num_blocks: int = 1) -> list[RBlock]:
        self._reserve(req_id, -num_blocks)
        return self._alloc_run(req_id, num_blocks)

    def borrow(self, req_id: int, num_blocks: int) -> list[RBlock]:
        """try_move_kvcache and take_reserved in one: `num_blocks` blocks for `req_id` now, or none when short of
        space (one message from a home in another process instead of two)."""
        return self.take_reserved(req_id, num_blocks) if self.try_move_kvcache(req_id, num_blocks) else []

    def take_for_move(self, req_id: int, num_blocks: int) -> list[RBlock]:
        """`num_blocks` blocks here for a remote request that moves here whole (its home copies its KV into them,
        then this instance adopts it: `adopt_moved`), out of its reservation here and the free room; none when
        short (a peer in another process asks: the home's rManager noted first, `note_home`)."""
        if num_blocks <= 0 or req_id in self.tables or num_blocks > self.num_free + self.num_reserved_for(req_id):
            return []
        self.cancel_reservation(req_id)
        return self._alloc_run(req_id, num_blocks)

    def adopt_moved(self, req_id: int, blocks: list[RBlock]) -> None:
        """Request `req_id` moved here whole: `blocks`, every block hosted here for it (filled by its old home,
        which freed its own), become its table in token order, and this instance its home."""
        assert all(b.inst_id == self.inst_id for b in blocks) and self.hosted.get(req_id, 0) == len(blocks), \
            f"request {req_id}'s rBlocks are not all here"
        self._remote_homes.pop(req_id, None)
        self.cancel_reservation(req_id)
        self.tables[req_id] = list(blocks)
        self.changes.homes[req_id] = self.inst_id
        self.holders_by_req[req_id] = {}
        self._count(req_id, self.inst_id, len(blocks))
        self._touch(req_id)

    def num_reserved_for(self, req_id: int) -> int:
        return self.reserved.get(req_id, 0)

    def cancel_reservation(self, req_id: int, num_blocks: int | None = None) -> None:
        have = self.reserved.get(req_id, 0)
        if have:
            self._reserve(req_id, -(have if num_blocks is None else min(have, num_blocks)))

    # --- home side
    def add_request(self, req_id: int) -> None:
        self.tables[req_id] = []
        self.changes.homes[req_id] = self.inst_id
        self.holders_by_req[req_id] = {}
        self._touch(req_id)

    def _count(self, req_id: int, inst_id: int, n: int) -> None:
        holders = self.holders_by_req[req_id]
        holders[inst_id] = holders.get(inst_id, 0) + n
        if not holders[inst_id]:
            del holders[inst_id]
        self._count_totals(inst_id, n)

    def _count_totals(self, inst_id: int, n: int) -> None:
        self.note_change()
        if inst_id != self.inst_id:
            self.num_borrowed += n
        else:
            self.num_home_here += n

    def _append(self, req_id: int, blocks: list[RBlock]) -> None:
        """Blocks of one instance at the end of `req_id`'s table."""
        self.tables[req_id].extend(blocks)
        self._count(req_id, blocks[0].inst_id, len(blocks))

    def set_block(self, req_id: int, index: int, block: RBlock) -> None:
        """Point logical block `index` of home request `req_id` at `block` (after its KV was copied there)."""
        table = self.tables[req_id]
        src, dst = table[index].inst_id, block.inst_id
        table[index] = block
        holders = self.holders_by_req[req_id]  # (as _count -1 on src then +1 on dst, with one change counted)
        if holders[src] == 1:
            del holders[src]
        else:
            holders[src] -= 1
        holders[dst] = holders.get(dst, 0) + 1
        if src != dst and self.inst_id in (src, dst):  # sent away from home, or brought home
            home_gain = 1 if dst == self.inst_id else -1
            self.num_home_here += home_gain
            self.num_borrowed -= home_gain
        self.note_change()
        self.block_placed(req_id, index, dst, src not in holders or holders[dst] == len(table))

    def append_block(self, req_id: int, recommend: Recommend | None = None) -> RBlock | None:
        """A new tail rBlock: local if there is room, else on the remote tail's instance, else on a
        recommended creditor (None when `recommend` is None, i.e. pooling is off, or all refuse)."""
        if self.num_free == 0:
            self._reclaim_reservations(1)
        if self.num_free > 0:
            block = self._alloc(req_id)
        else:
            block = self._borrow(req_id, recommend)
        if block is not None:
            self._append(req_id, [block])
        return block

    def free_request(self, req_id: int) -> None:
        table = self.tables.pop(req_id, [])
        if self.changes.homes.get(req_id) == self.inst_id:
            del self.changes.homes[req_id]
        self._release_at_holders(table)
        for inst_id, n in self.holders_by_req.pop(req_id, {}).items():
            self._count_totals(inst_id, -n)
        self.cancel_moves(req_id)
        self.cancel_reservation(req_id)
        self.frozen.discard(req_id)
        self._touch(req_id)

    def _reclaim_reservations(self, num_blocks: int) -> None:
        """Take back up to `num_blocks` of the room reserved here for remote requests' incoming KV that has
        not arrived yet (infinite-llm 5.2: a creditor short of local space reclaims what it lent). A move
        into that room then ends early; a reservation can otherwise pin this instance's memory for as long
        as the source's steps take (one chunk per step, and a long prefill is one step)."""
        for req_id in sorted(self._remote_reserved_ids, key=lambda r: (-self.reserved[r], r)):
            if num_blocks <= 0:
                return
            n = min(num_blocks, self.reserved[req_id])
            self.cancel_reservation(req_id, n)
            num_blocks -= n

    def alloc_for_swap(self, req_id: int) -> RBlock:
        """A block for a DGFM recall: the swap freed one here just before, so no reservation is needed."""
        return self._alloc(req_id)
