"""What an instance's loop publishes for the driver and its peers to read (loop.py), replaced whole at each control
phase and on each change of state: no reader sees a half-written one."""
from collections import deque
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


class Dispatched:
    """The driver's count of what it sent one instance: the rBlocks of the requests its latest snapshot has not taken
    in yet (Snapshot.num_added), and no more (a long-serving driver keeps nothing per request)."""

    def __init__(self):
        self.num_sent = 0
        self.unseen: deque[int] = deque()  # rBlocks of the latest requests sent, oldest first

    def add(self, blocks: int) -> None:
        self.unseen.append(blocks)
        self.num_sent += 1

    def unseen_blocks(self, num_added: int) -> int:
        """rBlocks of the requests sent that the loop had not taken in when it had taken `num_added`."""
        while len(self.unseen) > self.num_sent - num_added:
            self.unseen.popleft()
        return sum(self.unseen)
