"""Holds and DGFM swaps. A loop holds at its iteration boundary while anyone holds it (the driver's pause, a DGFM
swap run by another instance): it answers its mail and runs no control phase until every holder let go. A swap
frees and refills full instances at once, so the instance carrying one out holds every other instance it touches
(nobody may step on the blocks before the data lands), swaps, moves the data in one exchange and lets them go."""
import threading
from dataclasses import replace

from reference_impl.backends.ray.mailbox import IDLE_WAIT_S
from reference_impl.backends.ray.owned import Owned
from reference_impl.backends.ray.snapshot import HELD, RUNNING
from reference_impl.control.dgfm import execute_swap


class Holds(Owned):
    def __init__(self):
        self.events: list[threading.Event] = []  # hold requests to acknowledge at the next iteration boundary
        self.holders: set = set()

    @property
    def wanted(self) -> bool:
        return bool(self.events or self.holders)

    def add(self, holder, event: threading.Event) -> None:
        self.holders.add(holder)
        self.events.append(event)

    def release(self, holder) -> None:
        self.holders.discard(holder)

    def acknowledge(self) -> None:
        for event in self.events:
            event.set()
        self.events = []


def hold_here(loop) -> None:
    """At the boundary: no control phase runs here until every holder let go; mail is still answered."""
    holds = loop.holds
    loop.exchange.wait_served()  # what the partners do for this home is done before the holder looks
    holds.acknowledge()
    loop.snapshot = replace(loop.snapshot, state=HELD)

    def may_go_on() -> bool:
        holds.acknowledge()  # a second holder while held: it holds already
        return not holds.holders or loop.stopping

    # only mail lets it go on (a release, a stop): a held loop that polled every POLL_S took 4% of a core, stolen
    # from the engine serving beside it
    loop.mailbox.wait(may_go_on, poll_s=IDLE_WAIT_S)
    loop.snapshot = replace(loop.snapshot, state=RUNNING)


def carry_out_swap(loop, swap) -> None:
    """A DGFM swap, carried out while every other instance it touches holds at its iteration boundary."""
    involved = sorted({i for _, creditor, home, _ in swap.recalls for i in (creditor, home)} - {loop.inst_id})
    involved = [i for i in involved if i in loop.handles]
    for ref in [loop.handles[i].hold.remote(loop.inst_id) for i in involved]:
        loop.wait_ref(ref)
    exchange = loop.exchange
    try:
        exchange.pairs = []
        execute_swap(swap, loop.rm.peers, exchange.copy_blocks)
        works = exchange.partner_works(None)
        if works or exchange.pairs:
            exchange.run(None, works)
            exchange.wait_served()
        exchange.pairs = []
    finally:
        for i in involved:
            loop.handles[i].unhold.remote(loop.inst_id)
    loop.link.swap_done(swap)
    loop.stats.num_swaps += 1
