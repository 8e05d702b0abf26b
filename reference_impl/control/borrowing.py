"""Admission of a request and borrowing rBlocks from creditors, one rManager's side (infinite-llm 5.2, 6.2).

A request is admitted all or none: local rBlocks first, the rest as runs on creditors the gManager
recommends (and, for a request larger than this instance or a growing one, any peer with fresh room); a
growing request's next rBlock goes where its remote tail lives, else to a creditor.
"""
from collections.abc import Callable

from reference_impl.control.rblock import RBlock

Recommend = Callable[[int, int], list[int]]  # (debtor inst, num_blocks) -> creditor candidates


class Borrowing:
    """Mixed into RManager. What it reads of the rManager is public or its own bookkeeping: inst_id, peers,
    tables, pool, changes, can_borrow, num_free, _num_remote_reserved, _peers_lendable, _alloc, _alloc_run,
    _append, _reclaim_reservations, add_request, free_request."""

    def _creditors(self, num_blocks: int, recommend: Recommend, exclude: tuple[int, ...] = (), *,
                   fresh: bool = True) -> list[int]:
        """The gManager's candidates, then (`fresh`) every other peer by fresh lendable room: stale heartbeats
        may leave out an instance that has room now, and a request that must spill, or a running one that
        must grow, cannot wait on them for good."""
        skip = {self.inst_id, *exclude}
        hinted = [i for i in dict.fromkeys(recommend(self.inst_id, num_blocks)) if i not in skip and i in self.peers]
        if not fresh:
            return hinted
        rest = [i for i in sorted(self.peers) if i not in skip and i not in hinted]
        return hinted + sorted(rest, key=lambda i: -self.peers[i].num_lendable)

    def _borrow(self, req_id: int, recommend: Recommend | None) -> RBlock | None:
        if recommend is None or not self.can_borrow:
            return None
        table = self.tables[req_id]
        tail = [table[-1].inst_id] if table and table[-1].inst_id != self.inst_id else []
        for inst_id in tail + self._creditors(1, recommend, tuple(tail)):
            if taken := self.peers[inst_id].borrow(req_id, 1):
                return taken[0]
        return None

    def num_admissible(self, pooled: bool, peers_lendable: int | None = None) -> int:
        """rBlocks a new request could get now: free here (reservations for remote KV may be taken back), plus
        what creditors may lend when `pooled` and this instance may borrow (`peers_lendable`: their sum, when
        the caller has read it already)."""
        here = self.num_free + self._num_remote_reserved
        if not (pooled and self.can_borrow):
            return here
        if peers_lendable is None:  # (admission is retried every step: memoised when the peers share `changes`)
            memo = self._peers_lendable
            peers_lendable = (self._peers_lendable_now() if memo is None
                              else memo.get(self.changes.memory, self._peers_lendable_now))
        return here + peers_lendable

    def _peers_lendable_now(self) -> int:
        return sum(p.num_lendable for i, p in self.peers.items() if i != self.inst_id)

    def can_admit(self, num_blocks: int, pooled: bool) -> bool:
        return num_blocks <= self.num_admissible(False) or (pooled and num_blocks <= self.num_admissible(pooled))

    def alloc_prompt(self, req_id: int, num_blocks: int, recommend: Recommend | None = None) -> bool:
        """Admit a request with `num_blocks` rBlocks: local ones first, the rest on creditors; all or none."""
        if not self.can_admit(num_blocks, recommend is not None):
            return False  # cannot fit anywhere now: refuse before allocating (admission is retried every step)
        self._reclaim_reservations(num_blocks - self.num_free)
        self.add_request(req_id)
        while len(self.tables[req_id]) < num_blocks:
            missing = num_blocks - len(self.tables[req_id])
            if self.num_free > 0:
                self._append(req_id, self._alloc_run(req_id, min(missing, self.num_free)))
                continue
            got = self._borrow_run(req_id, missing, recommend, must_spill=num_blocks > self.pool.num_capacity)
            if not got:
                self.free_request(req_id)
                return False
        return True

    def alloc_runs(self, req_id: int, runs: list[tuple[int, int]]) -> bool:
        """Admit a request with its rBlocks in `runs`, (inst_id, rBlocks) in token order: this instance's from its
        free room, a peer's borrowed there; all or none."""
        self.add_request(req_id)
        for inst_id, n in runs:
            if inst_id == self.inst_id:
                got = self._alloc_run(req_id, n) if n <= self.num_free else []
            else:
                got = self.peers[inst_id].borrow(req_id, n)
            if len(got) < n:
                self.free_request(req_id)
                return False
            self._append(req_id, got)
        return True

    def _borrow_run(self, req_id: int, missing: int, recommend: Recommend | None, must_spill: bool) -> int:
        """A run of rBlocks on one creditor; only the gManager's candidates unless the request is larger than
        this instance (one that fits here may wait for local room rather than take a creditor's)."""
        if recommend is None or not self.can_borrow:
            return 0
        for inst_id in self._creditors(missing, recommend, fresh=must_spill):
            rm = self.peers[inst_id]
            size = min(missing, rm.num_lendable)
            if size > 0 and (taken := rm.borrow(req_id, size)):
                self._append(req_id, taken)
                return len(taken)
        return 0
