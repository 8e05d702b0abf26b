"""What an instance's loop publishes for the driver and its peers to read (loop.py), replaced whole at each control
phase and on each change of state: no reader sees a half-written one."""
from dataclasses import dataclass, field

from reference_impl.backends.ray.stats import LoopStats
from reference_impl.control.protocol import InstanceStatus, RequestPlacementEntry

STARTING, RUNNING, HELD, REFORMING, BROKEN, STOPPED = "starting", "running", "held", "reforming", "broken", "stopped"


@dataclass(frozen=True, slots=True)
class Snapshot:
    state: str = STARTING
    group: str | None = None  # the address of the data-plane group it runs in (a failure names the one it broke)
    status: InstanceStatus | None = None  # None: not published yet
    num_used: int = 0  # rBlocks in use
    reserved: dict[int, int] = field(default_factory=dict)  # req_id -> rBlocks reserved for a move here
    num_moves: int = 0  # KV moves pending
    num_tables: int = 0  # requests with KV here
    num_running: int = 0
    num_waiting: int = 0
    num_added: int = 0  # requests the driver sent that the loop took in
    entries: tuple[RequestPlacementEntry, ...] = ()
    stats: LoopStats | None = None
    error: str | None = None  # the failure, in a BROKEN or REFORMING one
