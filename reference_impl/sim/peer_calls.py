"""A simulated instance's calls on its peers' rManagers that wait for a reply on the Ray engine (there each is a
round trip to the peer's loop: a reservation, taking reserved blocks, both at once (borrow), a creditor's reclaim
asks, a look at the peer's tables), counted per caller so that the simulator can charge each a calibrated latency
on the caller's next step (EngineCosts.peer_call_s). Which calls wait is the Ray engine's RemoteRManager's
(backends/ray/peers.py, its `ask` calls): the names below, kept equal to those by tests/sim/test_sim_peer_calls.py. Only
installed where that latency is non-zero."""

WAITING_CALLS = frozenset({"try_move_kvcache", "take_reserved", "borrow", "move_kvcache", "num_moving",
                           "set_block", "alloc_for_swap"})


class _CountedTables:
    """A peer's tables: a membership test or a lookup is a call (RemoteTables)."""

    def __init__(self, tables: dict, count):
        self._tables, self._count = tables, count

    def __contains__(self, req_id) -> bool:
        self._count()
        return req_id in self._tables

    def __getitem__(self, req_id):
        self._count()
        return self._tables[req_id]


class CountingPeer:
    """Peer rManager `rm` as instance `caller` sees it: everything as is, its waiting calls counted in
    `pending[caller].num_peer_calls` (SimBackend.pending)."""

    def __init__(self, rm, caller: int, pending: list):
        self._rm, self._caller, self._pending = rm, caller, pending

    def _count(self) -> None:
        self._pending[self._caller].num_peer_calls += 1

    def __getattr__(self, name: str):
        value = getattr(self._rm, name)
        if name == "tables":
            return _CountedTables(value, self._count)
        if name not in WAITING_CALLS:
            return value

        def counted(*args, **kwargs):
            self._count()
            return value(*args, **kwargs)
        return counted


def count_peer_calls(instances, pending: list) -> None:
    """Give each instance's rManager its own view of the peers, whose waiting calls count in `pending`."""
    for inst in instances:
        rm = inst.rm
        rm.peers = {i: p if i == rm.inst_id else CountingPeer(p, rm.inst_id, pending) for i, p in rm.peers.items()}
