"""The cluster's room as the engine reads it for admission against the pool: each instance's lendable and free
rBlocks, their sums, and the pooled room of each instance asked since memory last changed."""
from reference_impl.control.memo import Changes


class ClusterRoom:
    """Valid while `changes.memory` stands at `memory`; `refresh` brings it up to date, re-reading only the rManagers
    changed since (its reader of `changes`) and moving the sums by their differences."""

    __slots__ = ("lendable", "free", "total_lendable", "total_free", "pooled", "memory", "_reader")

    def __init__(self, rmanagers: dict, changes: Changes):
        self._reader = changes.reader(len(rmanagers), queues=False)
        self._reader.take()
        self.lendable = [rmanagers[i].num_lendable for i in sorted(rmanagers)]
        self.free = [rmanagers[i].num_free for i in sorted(rmanagers)]
        self.total_lendable, self.total_free = sum(self.lendable), sum(self.free)
        self.pooled: dict[int, int] = {}  # inst_id -> rBlocks it could admit with what creditors lend, read so far
        self.memory = changes.memory

    def refresh(self, rmanagers: dict, changes: Changes) -> None:
        lendable, free = self.lendable, self.free
        for i in self._reader.take():
            rm = rmanagers[i]
            now_lendable, now_free = rm.num_lendable, rm.num_free
            self.total_lendable += now_lendable - lendable[i]
            self.total_free += now_free - free[i]
            lendable[i], free[i] = now_lendable, now_free
        self.pooled = {}
        self.memory = changes.memory

    def pooled_room(self, inst) -> int:
        """rBlocks `inst` could admit now: its own room plus what the other instances may lend."""
        room = self.pooled.get(inst.inst_id)
        if room is None:
            room = self.pooled[inst.inst_id] = inst.rm.num_admissible(
                True, self.total_lendable - self.lendable[inst.inst_id])
        return room
