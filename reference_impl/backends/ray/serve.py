"""A creditor's side of a home's step: the part of the plan the home sent it, served in a thread of the creditor's
actor while the creditor's own loop runs its own steps (a dedicated path: the home waits only for this
MicroAttention and the link, and the creditor never waits for its debtors).

Thread safety: this thread touches only the rBlocks of the home's requests (stored and attended as the home's
plan says) and the blocks of the step's moves; the rManager stays the loop's, so releases of the blocks moved
out of here go to the loop's mailbox once they have been read.
"""
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

from reference_impl.backends.ray.dataplane import SEGMENT_KV, tag
from reference_impl.backends.sp_prefill import SegmentPlan, Segments
from reference_impl.backends.ray.step import Ask, DistStep
from reference_impl.control.rblock import RBlock


@dataclass(slots=True)
class PartnerWork:
    """What home `home` asks one partner to do in one of its steps."""

    home: int
    group: str  # the data-plane group it was planned in (a work of a group since re-formed is dropped)
    ask: Ask | None  # attention over the home's rBlocks here; None: this step only moves KV here or from here
    pairs: list[tuple] = field(default_factory=list)  # KV block pairs of the step this partner reads or writes
    releases: list[RBlock] = field(default_factory=list)  # blocks moved out of here: released once read
    number: int = 0  # the home's works for this partner in this group, counted from 0: served in this order
    adopt: list = field(default_factory=list)  # messages.Adopt of requests moving here whole, once this step's KV landed
    segments: SegmentPlan | None = None  # a sequence-parallel prefill this partner computes its segments of


class InTurn:
    """A partner serves each home's works in the home's order, one at a time: the home sends a step's work without
    waiting for the previous one to return (Ray runs a threaded actor's calls in any order), and two served steps
    of one home must not overlap (their data-plane tags are the same, their KV moves build on each other)."""

    def __init__(self):
        self.cond = threading.Condition()
        self.next: dict[tuple[int, str], int] = {}  # (home, group) -> number of the work whose turn it is

    @contextmanager
    def turn(self, work: PartnerWork, timeout_s: float):
        key = (work.home, work.group)
        with self.cond:
            if not self.cond.wait_for(lambda: self.next.get(key, 0) >= work.number, timeout_s):
                raise TimeoutError(f"home {work.home}'s work {self.next.get(key, 0)} never came (waited {timeout_s} s)")
        try:
            yield
        finally:
            with self.cond:
                self.next[key] = work.number + 1
                self.cond.notify_all()


def serve(work: PartnerWork, loop) -> float:
    """Run `work` on `loop`'s instance; returns the seconds spent waiting on the data plane."""
    plane = loop.plane
    if plane is None or plane.spec.address != work.group:
        return 0.0
    step = DistStep(loop.inst_id, plane, loop.caches, None, {work.home: work.ask} if work.ask else {},
                    work.pairs, work.home, loop.model.config, loop.config.block_size, loop.model.dtype, loop.device)
    if work.releases:  # read: the moves' sources were staged when the step was made
        loop.mailbox.post(loop.rm.release_blocks, work.releases)
    if work.segments is not None:  # (such a step moves no KV: exchange.make_batch)
        part = Segments(work.segments, loop.inst_id, loop.model, loop.caches, plane, loop.config.block_size,
                        loop.device, lambda layer: tag(work.home, layer, SEGMENT_KV))
        with torch.inference_mode():
            part.hand_over(part.run())
        return part.messaging_s
    with torch.inference_mode():
        for layer in range(loop.model.config.num_layers):
            step.attend(layer)
    for adopt in work.adopt:  # every layer of their KV is here now
        loop.post(adopt)
    return step.messaging_s
