"""Change counts and the memo keyed on them: a value derived from some state holds while the count of that
state's changes has not moved, so each shortcut of the engine and the simulator is one `Memo` and one key."""

_NONE = object()  # the key of a memo that holds nothing yet


class Changes:
    """How many times one engine's state changed: `memory` (any of its rManagers' blocks, reservations, counts,
    moves, entries) and `queues` (any of its schedulers' waiting and running requests, a blocked head). The engine
    owns it and gives it to its rManagers and schedulers, which count every change inline (a hot path).
    `changed_rms`: the rManagers (inst ids) changed since the engine's ClusterRoom (room.py) last refreshed, so
    that it re-reads only those."""

    __slots__ = ("memory", "queues", "changed_rms")

    def __init__(self):
        self.memory = 0
        self.queues = 0
        self.changed_rms: set[int] = set()


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
