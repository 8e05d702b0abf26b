"""Change counts and the memo keyed on them: a value derived from some state holds while the count of that
state's changes has not moved, so each shortcut of the engine and the simulator is one `Memo` and one key.
Which instances changed is kept too (`Changes.changed_rms`, `changed_queues`), so that an index over the cluster
re-reads only those (a `ChangeReader` each)."""

_NONE = object()  # the key of a memo that holds nothing yet


class ChangeReader:
    """The instances whose memory (`memory`) or queues (`queues`), as asked, changed since this reader last took
    them (`take`; a new reader has every instance to read once)."""

    __slots__ = ("changed", "memory", "queues", "_changes")

    def __init__(self, changes: "Changes", num_instances: int, memory: bool, queues: bool):
        self.changed: set[int] = set(range(num_instances))
        self.memory, self.queues, self._changes = memory, queues, changes

    def take(self) -> set[int]:
        self._changes.flush()
        changed, self.changed = self.changed, set()
        return changed


class Changes:
    """How many times one engine's state changed: `memory` (any of its rManagers' blocks, reservations, counts,
    moves, entries) and `queues` (any of its schedulers' waiting and running requests, a blocked head). The engine
    owns it and gives it to its rManagers and schedulers, which count every change inline (a hot path) and add
    their instance to `changed_rms` / `changed_queues`; `flush` hands those to every reader. `homes`: the home
    instance of each request of the rManagers sharing it (RManager.home_of reads it instead of every peer)."""

    __slots__ = ("memory", "queues", "changed_rms", "changed_queues", "_readers", "homes")

    def __init__(self):
        self.memory = 0
        self.queues = 0
        self.changed_rms: set[int] = set()
        self.changed_queues: set[int] = set()
        self._readers: list[ChangeReader] = []
        self.homes: dict[int, int] = {}

    def reader(self, num_instances: int, *, memory: bool = True, queues: bool = True) -> ChangeReader:
        """A reader of the changes of instances 0..num_instances-1 from now on."""
        reader = ChangeReader(self, num_instances, memory, queues)
        self._readers.append(reader)
        return reader

    def flush(self) -> None:
        """Hand the instances changed since the last flush to every reader."""
        rms, queues = self.changed_rms, self.changed_queues
        if rms or queues:
            for reader in self._readers:
                if reader.memory:
                    reader.changed |= rms
                if reader.queues:
                    reader.changed |= queues
            rms.clear()
            queues.clear()


class Memo:
    """The last value computed and the key it was computed at."""

    __slots__ = ("key", "value")

    def __init__(self):
        self.key = _NONE
        self.value = None

    def get(self, key, compute):
        """The value at `key`: the held one when `key` is the last key, else `compute()` (then held)."""
        if key != self.key:
            self.value = compute()
            self.key = key
        return self.value

    def holds(self, key) -> bool:
        return key == self.key

    def set(self, key, value=None) -> None:
        self.key, self.value = key, value
