"""rManager: one instance's rBlocks (distkv-llm 4.3) and its side of the protocol (infinite-llm 6.2).

For every request homed here it keeps the logical-to-physical table (rBlocks in token order, wherever they
live); for every physical block here it knows the owning request. Remote requests get blocks only through
`try_move_kvcache` reservations, first come first served, under a cap on blocks lent out. Moves run in
chunks: `advance_moves` copies a few blocks per engine step through the backend's `copy_blocks`.
Pure Python: the simulator and the local and Ray backends share it.
"""
import itertools
from collections.abc import Callable
from dataclasses import dataclass

from reference_impl.protocol import Heartbeat, InstanceStatus, RequestPlacementEntry
from reference_impl.rblock import BlockPool, RBlock

CopyBlocks = Callable[[list[tuple[RBlock, RBlock]]], None]  # reads every source, then writes every destination
Recommend = Callable[[int, int], list[int]]  # (debtor inst, num_blocks) -> creditor candidates


@dataclass(slots=True)
class KVMove:
    req_id: int
    dst_inst: int
    num_blocks: int  # still to move


class RManager:
    def __init__(self, inst_id: int, num_device_blocks: int, num_cpu_blocks: int = 0,
                 max_lent_blocks: int | None = None, peers: dict | None = None):
        self.inst_id = inst_id
        self.pool = BlockPool(num_device_blocks, num_cpu_blocks)
        self.max_lent_blocks = self.pool.num_capacity if max_lent_blocks is None else max_lent_blocks
        self.tables: dict[int, list[RBlock]] = {}  # home requests: rBlocks in token order
        self.hosted: dict[int, int] = {}  # req_id -> physical blocks here (home or remote request)
        self.reserved: dict[int, int] = {}  # req_id -> blocks promised by try_move_kvcache
        self.moves: list[KVMove] = []
        self.frozen: set[int] = set()
        self.peers = {} if peers is None else peers
        self.peers[inst_id] = self
        self._ids = itertools.count(inst_id << 40)
        self._changed: set[int] = set()
        self._removed: set[int] = set()

    # --- accounting
    @property
    def num_reserved(self) -> int:
        return sum(self.reserved.values())

    @property
    def num_free(self) -> int:
        return self.pool.num_free - self.num_reserved

    @property
    def num_lent(self) -> int:
        return sum(n for req_id, n in self.hosted.items() if req_id not in self.tables)

    @property
    def num_lendable(self) -> int:
        return max(0, min(self.num_free, self.max_lent_blocks - self.num_lent - self._remote_reserved()))

    def _remote_reserved(self) -> int:
        return sum(n for req_id, n in self.reserved.items() if req_id not in self.tables)

    def entries(self) -> list[RequestPlacementEntry]:
        req_ids = sorted(set(self.tables) | {r for r, n in self.hosted.items() if n})
        return [self._entry(r) for r in req_ids]

    def _entry(self, req_id: int) -> RequestPlacementEntry:
        return RequestPlacementEntry(req_id, self.inst_id, self.hosted.get(req_id, 0), req_id in self.tables)

    def heartbeat(self, status: InstanceStatus, *, full: bool = False) -> Heartbeat:
        """The changed entries since the last heartbeat, or every entry when `full`."""
        if full:
            hb = Heartbeat(status, tuple(self.entries()), (), True)
        else:
            hb = Heartbeat(status, tuple(self._entry(r) for r in sorted(self._changed - self._removed)),
                           tuple(sorted(self._removed)))
        self._changed.clear()
        self._removed.clear()
        return hb

    def _touch(self, req_id: int) -> None:
        self._changed.add(req_id)
        if req_id in self.tables or self.hosted.get(req_id, 0):
            self._removed.discard(req_id)
        else:
            self._removed.add(req_id)

    # --- physical side
    def _alloc(self, req_id: int) -> RBlock:
        device, address = self.pool.alloc(req_id)
        self.hosted[req_id] = self.hosted.get(req_id, 0) + 1
        self._touch(req_id)
        return RBlock(next(self.peers[self._home(req_id)]._ids), self.inst_id, device, address)

    def _home(self, req_id: int) -> int:
        for inst_id, rm in self.peers.items():
            if req_id in rm.tables:
                return inst_id
        return self.inst_id

    def release(self, block: RBlock) -> None:
        req_id = self.pool.free(block.device, block.address)
        self.hosted[req_id] -= 1
        if not self.hosted[req_id]:
            del self.hosted[req_id]
        self._touch(req_id)

    def try_move_kvcache(self, req_id: int, num_blocks: int) -> bool:
        """Reserve room for `num_blocks` of `req_id`, first come first served; False when short of space."""
        room = self.num_free if req_id in self.tables else self.num_lendable
        if num_blocks <= 0 or num_blocks > room:
            return False
        self.reserved[req_id] = self.reserved.get(req_id, 0) + num_blocks
        return True

    def take_reserved(self, req_id: int) -> RBlock:
        self.reserved[req_id] -= 1
        if not self.reserved[req_id]:
            del self.reserved[req_id]
        return self._alloc(req_id)

    def num_reserved_for(self, req_id: int) -> int:
        return self.reserved.get(req_id, 0)

    def cancel_reservation(self, req_id: int, num_blocks: int | None = None) -> None:
        left = 0 if num_blocks is None else self.reserved.get(req_id, 0) - num_blocks
        if left > 0:
            self.reserved[req_id] = left
        else:
            self.reserved.pop(req_id, None)

    # --- home side
    def add_request(self, req_id: int) -> None:
        self.tables[req_id] = []
        self._touch(req_id)

    def append_block(self, req_id: int, recommend: Recommend | None = None) -> RBlock | None:
        """A new tail rBlock: local if there is room, else on the remote tail's instance, else on a
        recommended creditor (None when `recommend` is None, i.e. pooling is off, or all refuse)."""
        table = self.tables[req_id]
        if self.num_free == 0:
            self._reclaim_reservations(1)
        if self.num_free > 0:
            block = self._alloc(req_id)
        else:
            block = self._borrow(req_id, recommend)
        if block is not None:
            table.append(block)
        return block

    def _borrow(self, req_id: int, recommend: Recommend | None) -> RBlock | None:
        if recommend is None:
            return None
        table = self.tables[req_id]
        tail = [table[-1].inst_id] if table and table[-1].inst_id != self.inst_id else []
        for inst_id in tail + [i for i in recommend(self.inst_id, 1) if i not in tail]:
            if inst_id != self.inst_id and self.peers[inst_id].try_move_kvcache(req_id, 1):
                return self.peers[inst_id].take_reserved(req_id)
        return None

    def alloc_prompt(self, req_id: int, num_blocks: int, recommend: Recommend | None = None) -> bool:
        """Admit a request with `num_blocks` rBlocks: local ones first, the rest on creditors; all or none."""
        here = self.num_free + self._remote_reserved()
        if num_blocks > here and (recommend is None or num_blocks > here + sum(
                p.num_lendable for i, p in self.peers.items() if i != self.inst_id)):
            return False  # cannot fit anywhere now: refuse before allocating (admission is retried every step)
        self._reclaim_reservations(num_blocks - self.num_free)
        self.add_request(req_id)
        while len(self.tables[req_id]) < num_blocks:
            missing = num_blocks - len(self.tables[req_id])
            if self.num_free > 0:
                self.tables[req_id].append(self._alloc(req_id))
                continue
            got = self._borrow_run(req_id, missing, recommend)
            if not got:
                self.free_request(req_id)
                return False
        return True

    def _borrow_run(self, req_id: int, missing: int, recommend: Recommend | None) -> int:
        if recommend is None:
            return 0
        for inst_id in recommend(self.inst_id, missing):
            rm = self.peers[inst_id]
            size = min(missing, rm.num_lendable)
            if inst_id != self.inst_id and size > 0 and rm.try_move_kvcache(req_id, size):
                self.tables[req_id].extend(rm.take_reserved(req_id) for _ in range(size))
                return size
        return 0

    def free_request(self, req_id: int) -> None:
        for block in self.tables.pop(req_id, []):
            self.peers[block.inst_id].release(block)
        for move in [m for m in self.moves if m.req_id == req_id]:
            self.peers[move.dst_inst].cancel_reservation(req_id)
            self.moves.remove(move)
        self.cancel_reservation(req_id)
        self.frozen.discard(req_id)
        self._touch(req_id)

    def _reclaim_reservations(self, num_blocks: int) -> None:
        """Take back up to `num_blocks` of the room reserved here for remote requests' incoming KV that has
        not arrived yet (infinite-llm 5.2: a creditor short of local space reclaims what it lent). A move
        into that room then ends early; a reservation can otherwise pin this instance's memory for as long
        as the source's steps take (one chunk per step, and a long prefill is one step)."""
        for req_id in sorted((r for r in self.reserved if r not in self.tables), key=lambda r: (-self.reserved[r], r)):
            if num_blocks <= 0:
                return
            n = min(num_blocks, self.reserved[req_id])
            self.cancel_reservation(req_id, n)
            num_blocks -= n

    # --- KV movement
    def move_kvcache(self, req_id: int, num_blocks: int, dst_inst: int) -> bool:
        """Start moving `num_blocks` of a home request to `dst_inst` (home: recall remote blocks).
        Reserves on the destination first; a refused or impossible move returns False and waits."""
        if req_id not in self.tables or req_id in self.frozen or dst_inst not in self.peers:
            return False
        pending = sum(m.num_blocks for m in self.moves if m.req_id == req_id)
        num_blocks = min(num_blocks, self._num_movable(req_id, dst_inst) - pending)
        if num_blocks <= 0 or not self.peers[dst_inst].try_move_kvcache(req_id, num_blocks):
            return False
        self.moves.append(KVMove(req_id, dst_inst, num_blocks))
        return True

    def _movable(self, req_id: int, dst_inst: int) -> list[int]:
        table = self.tables[req_id]
        if dst_inst == self.inst_id:
            return [i for i, b in enumerate(table) if b.inst_id != self.inst_id]
        return [i for i, b in enumerate(table) if b.inst_id == self.inst_id]

    def _num_movable(self, req_id: int, dst_inst: int) -> int:
        """len(self._movable(...)) in O(1): `hosted` counts the request's blocks physically here."""
        here = self.hosted.get(req_id, 0)
        return len(self.tables[req_id]) - here if dst_inst == self.inst_id else here

    def _iter_movable(self, req_id: int, dst_inst: int):
        table = self.tables[req_id]
        if dst_inst == self.inst_id:
            return (i for i, b in enumerate(table) if b.inst_id != self.inst_id)
        return (i for i, b in enumerate(table) if b.inst_id == self.inst_id)

    def advance_moves(self, copy_blocks: CopyBlocks, max_blocks: int) -> int:
        """Move up to `max_blocks` blocks of the pending moves (one chunk); returns the number moved."""
        budget = max_blocks
        pairs = []
        moved = set()  # (req_id, index): a block moves at most once per chunk, so copies never chain
        for move in list(self.moves):
            # lazily: a chunk takes a few blocks of a long table (per-step cost must not grow with the table)
            candidates = (i for i in self._iter_movable(move.req_id, move.dst_inst) if (move.req_id, i) not in moved)
            while budget and move.num_blocks:
                if not self.peers[move.dst_inst].num_reserved_for(move.req_id):
                    move.num_blocks = 0  # the destination reclaimed the room: the move ends here
                    break
                index = next(candidates, None)
                if index is None:
                    break
                moved.add((move.req_id, index))
                src = self.tables[move.req_id][index]
                dst = self.peers[move.dst_inst].take_reserved(move.req_id)
                pairs.append((src, dst))
                self.tables[move.req_id][index] = dst
                move.num_blocks -= 1
                budget -= 1
            if not move.num_blocks or not self._num_movable(move.req_id, move.dst_inst):
                self.peers[move.dst_inst].cancel_reservation(move.req_id, move.num_blocks)
                self.moves.remove(move)
        if pairs:
            copy_blocks(pairs)
            for src, _ in pairs:
                self.peers[src.inst_id].release(src)
        return len(pairs)

    def alloc_for_swap(self, req_id: int) -> RBlock:
        """A block for a DGFM recall: the swap freed one here just before, so no reservation is needed."""
        return self._alloc(req_id)
