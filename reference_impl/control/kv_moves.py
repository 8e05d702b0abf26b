"""KV movement of one rManager's home requests, and the debtor/creditor policy of infinite-llm 5.2 on it.

A move takes blocks of one home request from a source (the home itself, one creditor, or any creditor)
to a destination that reserved the room with `try_move_kvcache`; `advance_moves` copies a few blocks per
engine step through the backend's `copy_blocks`, so the gManager's map (heartbeats) and the debt ledger
follow every block. On top of it:
- creditor reclaim (`reclaim_lent`): a creditor short of room asks the homes of the requests it hosts to
  take their blocks home, else to another creditor;
- debtor retrieval (`retrieve`): a debtor with room brings its offloaded blocks home.
"""
from dataclasses import dataclass

ANY_REMOTE = -1  # a move's source: any instance but the home (a recall)


@dataclass(slots=True)
class KVMove:
    req_id: int
    dst_inst: int
    num_blocks: int  # still to move
    src_inst: int = ANY_REMOTE  # where the blocks come from; set by move_kvcache
    cursor: int = 0  # no block before this table index is movable (set_block lowers it when one becomes so)


class KVMoves:
    """Mixed into RManager: its home requests' moves (`moves`, and `_moves_by_req`: indexed by request; both
    made empty by the rManager, as is `_emptied_reqs`: requests with moves of which set_block emptied a source since
    the last chunk). What it reads of the
    rManager is public: inst_id, peers, tables, holders_by_req, hosted, frozen, exclusive_roles, is_creditor,
    num_lent, set_block, home_of, note_change; the rManager calls is_moving_out, block_placed and cancel_moves."""

    @property
    def is_moving_out(self) -> bool:
        """A move is taking blocks of a home request to another instance."""
        return bool(self.moves) and any(m.dst_inst != self.inst_id for m in self.moves)

    def cancel_moves(self, req_id: int) -> None:
        """Drop the pending moves of home request `req_id` and the room they reserved."""
        for move in list(self._moves_by_req.get(req_id, ())):
            self.peers[move.dst_inst].cancel_reservation(req_id)
            self._drop_move(move)

    def _add_move(self, move: KVMove) -> None:
        self.moves.append(move)
        self.note_change()
        self._moves_by_req.setdefault(move.req_id, []).append(move)

    def _drop_move(self, move: KVMove) -> None:
        self.moves.remove(move)
        self.note_change()
        same = self._moves_by_req[move.req_id]
        same.remove(move)
        if not same:
            del self._moves_by_req[move.req_id]

    def move_kvcache(self, req_id: int, num_blocks: int, dst_inst: int, src_inst: int | None = None) -> bool:
        """Start moving `num_blocks` of a home request to `dst_inst` (home: recall remote blocks) from
        `src_inst` (None: from home, or from any creditor for a recall). Reserves on the destination first;
        a refused or impossible move returns False and waits."""
        if req_id not in self.tables or req_id in self.frozen or dst_inst not in self.peers:
            return False
        src = (ANY_REMOTE if dst_inst == self.inst_id else self.inst_id) if src_inst is None else src_inst
        if src == dst_inst or (self.exclusive_roles and dst_inst != self.inst_id and self.is_creditor):
            return False
        num_blocks = min(num_blocks, self._num_movable(req_id, src) - self.num_moving(req_id, src))
        if num_blocks <= 0 or not self.peers[dst_inst].try_move_kvcache(req_id, num_blocks):
            return False
        self._add_move(KVMove(req_id, dst_inst, num_blocks, src))
        return True

    def num_moving(self, req_id: int, src_inst: int) -> int:
        """Blocks of home request `req_id` that pending moves will still take from `src_inst`."""
        moves = self._moves_by_req.get(req_id, ())
        if src_inst == ANY_REMOTE:
            return sum(m.num_blocks for m in moves if m.src_inst != self.inst_id)
        overlaps = (src_inst, ANY_REMOTE) if src_inst != self.inst_id else (src_inst,)
        return sum(m.num_blocks for m in moves if m.src_inst in overlaps)

    def _num_movable(self, req_id: int, src_inst: int) -> int:
        holders = self.holders_by_req[req_id]
        if src_inst == ANY_REMOTE:
            return len(self.tables[req_id]) - holders.get(self.inst_id, 0)
        return holders.get(src_inst, 0)

    def _takes_from(self, move: KVMove, inst_id: int) -> bool:
        """A block on `inst_id` is one `move` may take."""
        if move.src_inst == ANY_REMOTE:
            return inst_id != self.inst_id and inst_id != move.dst_inst
        return inst_id == move.src_inst

    def _next_movable(self, move: KVMove, moved: set) -> int | None:
        """The first table index `move` may take that no move took in this chunk (`moved`). Scans from the
        move's cursor, so a long move costs O(1) a block, not O(table)."""
        table, skipped = self.tables[move.req_id], None
        for i in range(move.cursor, len(table)):
            if not self._takes_from(move, table[i].inst_id):
                continue
            if (move.req_id, i) in moved:  # movable again only in the next chunk
                skipped = i if skipped is None else skipped
                continue
            move.cursor = i + 1 if skipped is None else skipped
            return i
        move.cursor = len(table) if skipped is None else skipped
        return None

    def block_placed(self, req_id: int, index: int, inst_id: int, emptied: bool) -> None:
        """set_block put logical block `index` of `req_id` on `inst_id`: moves that may take it scan from there.
        `emptied`: the instance it left holds no block of it now, or every block is home (no remote one left)."""
        moves = self._moves_by_req.get(req_id)
        if moves:
            if emptied:
                self._emptied_reqs.add(req_id)
            for move in moves:
                if index < move.cursor and self._takes_from(move, inst_id):
                    move.cursor = index

    def advance_moves(self, copy_blocks, max_blocks: int) -> int:
        """Move up to `max_blocks` blocks of the pending moves (one chunk); returns the number moved."""
        if not self.moves:
            return 0
        budget = max_blocks
        pairs = []
        moved = set()  # (req_id, index): a block moves at most once per chunk, so copies never chain
        # Every pending move whose source has nothing left for it ends now, moved this chunk or not. A source
        # only empties as set_block takes its last block, so past the moves this chunk advances, only the moves
        # of requests with a source emptied since the last chunk (or in this one, before them) are checked.
        emptied, self._emptied_reqs = self._emptied_reqs, set()
        for move in list(self.moves):
            if budget and move.num_blocks:
                budget -= self._advance(move, budget, moved, pairs)
            elif move.num_blocks and move.req_id not in emptied and move.req_id not in self._emptied_reqs:
                continue  # (its source lost no block since its last check)
            if not move.num_blocks or not self._num_movable(move.req_id, move.src_inst):
                self.peers[move.dst_inst].cancel_reservation(move.req_id, move.num_blocks)
                self._drop_move(move)
        if pairs:
            copy_blocks(pairs)
            if len(pairs) == 1:  # (the common chunk: one block)
                src = pairs[0][0]
                self.peers[src.inst_id].release_blocks([src])
            else:
                self._release_at_holders([src for src, _ in pairs])
        return len(pairs)

    def _advance(self, move: KVMove, budget: int, moved: set, pairs: list) -> int:
        """Move up to `budget` blocks of `move` (adding the (source, destination) pairs to `pairs`); returns how
        many moved."""
        spent = 0
        while budget > spent and move.num_blocks:
            dst_rm = self.peers[move.dst_inst]
            reserved = dst_rm.num_reserved_for(move.req_id)
            if not reserved:
                move.num_blocks = 0  # the destination reclaimed the room: the move ends here
                break
            indices = []  # this chunk's blocks of the move, taken from the destination in one call
            want = min(budget - spent, move.num_blocks, reserved)
            while len(indices) < want:
                index = self._next_movable(move, moved)
                if index is None:
                    break
                indices.append(index)
                moved.add((move.req_id, index))
            if not indices:
                break
            taken = dst_rm.take_reserved(move.req_id, len(indices))
            table = self.tables[move.req_id]
            for index, dst in zip(indices, taken):
                pairs.append((table[index], dst))
                self.set_block(move.req_id, index, dst)
            move.num_blocks -= len(taken)
            spent += len(taken)
            if len(taken) < len(indices):  # a peer in another process took room back since this one last heard
                moved.difference_update((move.req_id, i) for i in indices[len(taken):])
                move.num_blocks = 0
                break
        return spent

    def _release_at_holders(self, blocks: list) -> None:
        """Free `blocks` on the instances holding them: one release_blocks call per instance."""
        by_holder: dict[int, list] = {}
        for block in blocks:
            by_holder.setdefault(block.inst_id, []).append(block)
        for inst_id, held in by_holder.items():
            self.peers[inst_id].release_blocks(held)

    def reclaim_lent(self, num_blocks: int) -> int:
        """Creditor short of `num_blocks`: ask the homes of the remote requests hosted here (largest first)
        to take those blocks home, else to another creditor. Returns how many blocks are on their way out
        (moves started now or before); the rest cannot go anywhere now."""
        if num_blocks <= 0 or not self.num_lent:
            return 0
        leaving = 0
        lendable = None  # other creditors' room, read once and only when a home has none
        for req_id in sorted((r for r in self.hosted if r not in self.tables), key=lambda r: (-self.hosted[r], r)):
            if leaving >= num_blocks:
                break
            if req_id not in self.hosted:  # released meanwhile (a peer in another process acts while this waits)
                continue
            home = self.peers[self.home_of(req_id)]
            want = min(num_blocks - leaving, self.hosted[req_id])
            pending = home.num_moving(req_id, self.inst_id)
            if pending < want:
                dsts = [home.inst_id]
                if lendable is None:
                    lendable = {i: p.num_lendable for i, p in self.peers.items() if i != self.inst_id}
                dsts += sorted((i for i, n in lendable.items() if n > 0 and i != home.inst_id),
                               key=lambda i: (-lendable[i], i))
                for dst in dsts:
                    n = want - pending if dst == home.inst_id else min(want - pending, lendable[dst])
                    if home.move_kvcache(req_id, n, dst, self.inst_id):
                        pending += n  # (move_kvcache may have clamped it; the next call reads the truth)
                        if dst != home.inst_id:
                            lendable[dst] -= n
                        break
            leaving += min(want, pending)
        return leaving

    def retrieve(self, num_blocks: int) -> int:
        """Debtor with `num_blocks` of room: recall offloaded blocks of home requests (most offloaded first,
        none that are being moved out); returns how many blocks were asked home."""
        asked = 0
        outgoing = {m.req_id for m in self.moves if m.dst_inst != self.inst_id}
        remote = [(len(t) - self.holders_by_req[r].get(self.inst_id, 0), r) for r, t in self.tables.items()
                  if r not in outgoing and r not in self.frozen]
        for num_remote, req_id in sorted(remote, key=lambda x: (-x[0], x[1])):
            n = min(num_blocks - asked, num_remote - self.num_moving(req_id, -1))
            if num_remote <= 0 or n <= 0:
                continue
            if self.move_kvcache(req_id, n, self.inst_id):
                asked += self.moves[-1].num_blocks
            if asked >= num_blocks:
                break
        return asked
