"""What the engine reads of the whole cluster on every event, kept per changed instance (indexes.py), so that an
event costs O(log n) in the number of instances, not O(n). Each index re-reads only the instances its reader of
the engine's `Changes` names, when it is asked; each answers exactly what a scan over every instance in id order
answers (tests/sim/test_sim_caches.py compares them at every round of a run)."""
from reference_impl.control.indexes import INF, KeyHeap, MinTree


class DispatchIndex:
    """The instance with the most free memory less what its queue needs (ties: the fewest running, the lowest id)."""

    def __init__(self, instances, changes):
        self._instances, self._reader = instances, changes.reader(len(instances))
        self._heap = KeyHeap(len(instances))

    def best(self):
        instances, heap = self._instances, self._heap
        for i in self._reader.take():
            inst = instances[i]
            s = inst.scheduler
            heap.set(i, (s.num_waiting_blocks - inst.rm.num_free, len(s.running), i))
        return instances[heap.top()[-1]]


class NeedIndex:
    """Each instance's fewest rBlocks a waiting request needs at admission (Scheduler.min_waiting_blocks)."""

    def __init__(self, instances, changes):
        self._instances, self._reader = instances, changes.reader(len(instances), memory=False)
        self.tree = MinTree(len(instances))

    def sync(self) -> MinTree:
        for i in self._reader.take():
            self.update(i)
        return self.tree

    def update(self, i: int) -> None:
        need = self._instances[i].scheduler.min_waiting_blocks
        self.tree.set(i, INF if need is None else need)

    def least(self) -> int | None:
        """The fewest of the cluster (None: nothing waits)."""
        least = self.sync().min()
        return None if least == INF else least


class IdleIndex:
    """The idle instances (nothing running; no waiting request, or the first one refused) by their pooled room
    (ClusterRoom.pooled_room): that of an instance that may borrow is its own room less what it lends plus all the
    cluster lends (`total_lendable`), that of one that may not is its own room alone; a tree for each kind holds
    minus the part that is the instance's own."""

    def __init__(self, instances, changes):
        self._instances, self._reader = instances, changes.reader(len(instances))
        self._borrowers, self._others = MinTree(len(instances)), MinTree(len(instances))

    def first(self, start: int, min_room: int, total_lendable: int) -> int | None:
        """The first idle instance at or after `start` whose pooled room is at least `min_room`."""
        borrowers, others = self._borrowers, self._others
        for i in self._reader.take():
            inst = self._instances[i]
            s, rm = inst.scheduler, inst.rm
            if s.running or (s.waiting and not s.is_head_blocked):
                borrowers.set(i, INF)
                others.set(i, INF)
            elif rm.can_borrow:
                borrowers.set(i, rm.num_lendable - rm.num_admissible(False))
                others.set(i, INF)
            else:
                borrowers.set(i, INF)
                others.set(i, -rm.num_admissible(False))
        a = borrowers.first_at_most(start, total_lendable - min_room)
        b = others.first_at_most(start, -min_room)
        return b if a is None else a if b is None else min(a, b)


class TargetIndex:
    """The instances with an empty queue and room in their batch, the most free memory first (ties: the lowest id):
    where redispatch may hand a request, in its order of preference."""

    def __init__(self, instances, changes):
        self._instances, self._reader = instances, changes.reader(len(instances))
        self._heap = KeyHeap(len(instances))

    def in_order(self):
        """The targets, in order, lazily (read nothing else of the engine's state until done with them)."""
        instances, heap = self._instances, self._heap
        for i in self._reader.take():
            s = instances[i].scheduler
            heap.set(i, (-instances[i].rm.num_free, i) if not s.waiting and len(s.running) < s.max_batch_size
                     else None)
        return (instances[key[-1]] for key in heap.in_order())
