"""Messages between rManagers and the gManager (infinite-llm Listing 1, distkv-llm 4.4).

    heartbeat(List[RequestPlacementEntry]) -> None           rManager -> gManager
    move_kvcache(req_id, num_blocks, dst_inst) -> None        gManager -> the request's home rManager
    try_move_kvcache(req_id, num_blocks) -> bool              source rManager -> destination rManager

A `RequestPlacementEntry` is (part of) one request's KV on one instance; `local` marks the request's home
(debtor) instance, whose entry exists for as long as the request lives, even with zero blocks. A heartbeat
carries the entries changed since the previous one, the requests that left the instance, and the instance's
load; after a gManager restart every rManager sends its full state (`full=True`).
"""
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class RequestPlacementEntry:
    req_id: int
    inst_id: int
    num_blocks: int
    local: bool


@dataclass(frozen=True, slots=True)
class InstanceStatus:
    inst_id: int
    num_capacity_blocks: int
    num_free_blocks: int  # free minus reservations
    num_lendable_blocks: int  # what a remote request may still get here (free and under the lending cap)
    batch_size: int  # running requests homed here
    num_waiting: int = 0
    mean_waiting_blocks: float = 0.0  # blocks a waiting request needs at admission
    preempted_waiting: bool = False  # a request it preempted waits at the front of its queue (Llumnix reads it)


@dataclass(frozen=True, slots=True)
class Heartbeat:
    status: InstanceStatus
    entries: tuple[RequestPlacementEntry, ...] = ()
    removed_req_ids: tuple[int, ...] = ()
    full: bool = False

    @property
    def inst_id(self) -> int:
        return self.status.inst_id


@dataclass(frozen=True, slots=True)
class MoveKVCache:
    req_id: int
    num_blocks: int
    dst_inst: int


@dataclass(frozen=True, slots=True)
class Swap:
    """A DGFM recall-and-swap: each (req_id, creditor, home, num_blocks) goes back home at once."""

    cycle: tuple[int, ...]
    num_blocks: int
    recalls: tuple[tuple[int, int, int, int], ...] = field(default=())

