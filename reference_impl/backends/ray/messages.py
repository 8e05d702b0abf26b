"""What goes into an instance loop and what comes out of it.

In: one channel, the loop's mailbox (mailbox.py), and one kind of message, a callable its thread runs. The
actor's Ray threads post the typed messages below as `loop.receive(msg)` (`InstanceLoop.post`); the gManager's
`MoveKVCache` and `Swap` (protocol.py) go the same way. Arrivals, aborts and the gManager's instructions wait in
the loop's inbox for its next control phase; the rest take effect when the loop serves its mail. A peer's
requests on this rManager and the driver's questions are calls through the same mailbox with a reply.

Out: the loop publishes a snapshot (a dict it replaces whole, never changes) and puts its reports of tokens and
finished requests in its `Outbox`, which the driver's results call empties."""
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from reference_impl.control.sequence import Sequence


@dataclass(frozen=True, slots=True)
class AddRequest:
    seq: Sequence


@dataclass(frozen=True, slots=True)
class Abort:
    """Drop a failed request: its blocks and reservations are freed at the next control phase."""

    req_id: int


@dataclass(frozen=True, slots=True)
class Migrate:
    """Migrate running request `req_id` live to instance `dst` (migration.py): the pause once at most
    `last_stage_blocks` are left to copy, an abort past `max_stages` stages."""

    req_id: int
    dst: int
    last_stage_blocks: int
    max_stages: int


@dataclass(frozen=True, slots=True)
class Adopt:
    """A request moved here whole (request_moves.py): its Sequence as its old home last had it and its rBlocks here
    in token order, sent with the step that copied its KV and posted once that step's KV landed here."""

    seq: Sequence
    blocks: list  # control.rblock.RBlock


@dataclass(frozen=True, slots=True)
class Served:
    """A debtor's step served in a Ray thread of this actor (serve.py), for the loop's statistics."""

    compute_s: float  # wall clock, data-plane waits excluded
    cpu_s: float  # the serving thread's CPU time


@dataclass(frozen=True, slots=True)
class Hold:
    """Hold at the next iteration boundary for `holder` (the driver's pause, a DGFM swap); `event` is set there."""

    holder: object
    event: threading.Event


@dataclass(frozen=True, slots=True)
class Unhold:
    holder: object


@dataclass(frozen=True, slots=True)
class Reform:
    """Join the survivors' new data-plane group at the next iteration boundary (rejoin.py)."""

    spec: object  # dataplane.GroupSpec
    dead: list[int]
    homed_there: list[int]  # requests homed on the dead instances: what they hold here is freed
    make_plane: Callable


@dataclass(frozen=True, slots=True)
class Stop:
    pass


@dataclass(frozen=True, slots=True)
class Report:
    tokens: dict[int, tuple[int, list[int]]] = field(default_factory=dict)  # req_id -> (first index, new tokens)
    finished: list[tuple] = field(default_factory=list)  # (req_id, placement, num_preemptions)


class Outbox:
    """Reports from the loop thread to the actor's results call, in the order the steps ended."""

    def __init__(self):
        self.queue: queue.SimpleQueue = queue.SimpleQueue()

    def put(self, report: Report) -> None:
        self.queue.put(report)

    def wake(self) -> None:
        """Let a waiting results call look at the snapshot now (the loop broke)."""
        self.queue.put(Report())

    def take(self, hold_s: float, stop: Callable[[], bool]) -> tuple[dict, list]:
        """Every report waiting, merged: (tokens, finished); waits up to `hold_s` for one unless `stop()`."""
        reports, deadline = [], time.monotonic() + hold_s
        while True:
            try:
                reports.append(self.queue.get_nowait())
                continue
            except queue.Empty:
                pass
            left = deadline - time.monotonic()
            if reports or left <= 0 or stop():
                break
            try:
                reports.append(self.queue.get(timeout=left))
            except queue.Empty:
                break
        tokens, finished = {}, []
        for report in reports:
            for req_id, (first, new) in report.tokens.items():
                start, before = tokens.get(req_id, (first, []))
                tokens[req_id] = (start, before + new)
            finished += report.finished
        return tokens, finished
