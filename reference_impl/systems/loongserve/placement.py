"""LoongServe's KV placement on an engine's instances: the rules (control/placement.py's Placement) its Engine is
built with (the simulator's policy and the local engine use them alike).

- At admission a prompt's rBlocks fill its master, then the idle instances (no running request, in no prefill
  group), the freest first (the creditor hint, `recommend`); only a prompt larger than its master spills further
  (RManager's rule). LoongServe's prefill group is drawn from the instances its iteration has free
  (`_schedule_new_req_list` sorts them by used tokens) and its plan fills one member after another
  (`_get_batch_prefill_migration_plan`); the ring leaves each token's KV where the plan puts it. Placing on a
  decoding instance would force it into the ring, which LoongServe does only when its model says the prefill gains
  more than the decode batch loses (the simulator's backend adds such members by that rule). The Scheduler asks
  `fits` first, so a prompt this placement cannot take waits without allocating.
- Scale-up: a decoding request whose master is full gets its next rBlock where its KV tail is, else on an idle
  instance, else on the one with the most room (RManager.append_block with the same hint); old KV never moves.
- No rebalancing: a debtor brings no borrowed block home when room frees (the Scheduler's `retrieval`).
"""
from collections.abc import Callable

from reference_impl.control.placement import Placement
from reference_impl.control.sequence import Sequence


def _no_retrieval(room: int) -> int:
    return 0


class LoongServePlacement:
    """On the instances of the engine `engine_of()` gives once it is built (the rules are given to its constructor);
    `in_prefill(inst_id)`: whether that instance is in a prefill group now."""

    def __init__(self, engine_of: Callable, in_prefill=lambda inst_id: False):
        self.engine_of, self.in_prefill = engine_of, in_prefill

    @property
    def engine(self):
        return self.engine_of()

    def rules(self) -> Placement:
        """What the Engine's constructor takes: the creditor hint, no retrieval, the admission check."""
        return Placement(recommend=self.idle_others, retrieval=_no_retrieval, fits=self.fits)

    def idle_others(self, debtor: int, num_blocks: int = 0) -> list[int]:
        """Where `debtor`'s request places the rBlocks its own room cannot take: the idle instances, freest first."""
        idle = [inst.rm for inst in self.engine.instances if inst.inst_id != debtor
                and not inst.scheduler.running and not self.in_prefill(inst.inst_id)]
        return [rm.inst_id for rm in sorted(idle, key=lambda rm: (-rm.num_free, rm.inst_id))]

    def fits(self, rm, seq: Sequence, num_blocks: int) -> bool:
        """Whether the master `rm` and the instances `idle_others` names can take `num_blocks` now (all instances,
        for a prompt larger than the master: RManager.alloc_prompt's rule)."""
        if num_blocks <= rm.num_free:
            return True
        if num_blocks > rm.pool.num_capacity:
            return rm.can_admit(num_blocks, True)
        rms = self.engine.rmanagers
        return num_blocks <= rm.num_free + sum(rms[i].num_lendable for i in self.idle_others(rm.inst_id))
