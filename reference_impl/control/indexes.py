"""Two indexes over the instances of a cluster, each updated per changed instance in O(log n), so that what the
engine asks of the whole cluster on every event costs O(log n), not O(n).

`KeyHeap`: a key per instance (None: not in it); the smallest key, or all keys in order (lazily), from a heap whose
outdated entries are dropped as they surface. `MinTree`: a number per instance; the first instance at or after a
given one whose number is at most a bound (a segment tree of minima).
"""
import heapq

INF = float("inf")


class KeyHeap:
    __slots__ = ("keys", "_heap", "_limit")

    def __init__(self, num_instances: int):
        self.keys: list = [None] * num_instances
        self._heap: list = []
        self._limit = 2 * num_instances + 64  # rebuilt past this many entries (outdated ones pile up)

    def set(self, i: int, key) -> None:
        """Instance `i`'s key (a tuple that ends with `i`, so that no two entries tie), or None: out of the heap."""
        if self.keys[i] == key:
            return
        self.keys[i] = key
        if key is not None:
            if len(self._heap) >= self._limit:
                self._heap = [k for k in self.keys if k is not None]
                heapq.heapify(self._heap)
            else:
                heapq.heappush(self._heap, key)

    def top(self):
        """The smallest key (None: empty)."""
        heap, keys = self._heap, self.keys
        while heap and keys[heap[0][-1]] != heap[0]:
            heapq.heappop(heap)
        return heap[0] if heap else None

    def in_order(self):
        """The keys, smallest first, each once; lazily (k keys cost O(k log k) plus the outdated entries met)."""
        heap, keys = self._heap, self.keys
        if not heap:
            return
        frontier, last = [(heap[0], 0)], None
        while frontier:
            key, at = heapq.heappop(frontier)
            if keys[key[-1]] == key and key != last:  # (a key set again after a change is in the heap twice)
                yield key
                last = key
            for child in (2 * at + 1, 2 * at + 2):
                if child < len(heap):
                    heapq.heappush(frontier, (heap[child], child))


class MinTree:
    __slots__ = ("_size", "_tree", "values")

    def __init__(self, num_instances: int):
        size = 1
        while size < num_instances:
            size *= 2
        self._size = size
        self._tree = [INF] * (2 * size)
        self.values = [INF] * num_instances

    def set(self, i: int, value) -> None:
        if self.values[i] == value:
            return
        self.values[i] = value
        tree = self._tree
        at = i + self._size
        tree[at] = value
        at >>= 1
        while at:
            low = min(tree[2 * at], tree[2 * at + 1])
            if tree[at] == low:
                break
            tree[at] = low
            at >>= 1

    def min(self):
        return self._tree[1]

    def first_at_most(self, start: int, bound) -> int | None:
        """The smallest i >= start with values[i] <= bound (None: none)."""
        tree, size = self._tree, self._size
        if start >= size:
            return None
        at = start + size
        while True:
            if tree[at] <= bound:
                while at < size:
                    at = 2 * at if tree[2 * at] <= bound else 2 * at + 1
                return at - size
            while at & 1:  # a right child: the next range starts after the parent's
                at >>= 1
            if not at:
                return None
            at += 1
