"""LoongServe's decisions on the shared control plane (sim/policy.py's hooks and the Scheduler's public knobs).

- Dispatch: a new request's master is an instance in no prefill group now (LoongServe's scheduler gives each
  iteration's new requests to the instances it frees for prefill), the one with the most free memory first.
- Placement at admission: a prompt's rBlocks fill its master, then the idle instances (no running request, in no
  prefill group), the freest first (the Scheduler's creditor hint, `recommend`); only a prompt larger than its
  master spills further (RManager's rule). LoongServe's prefill group is drawn from the instances its iteration
  has free (`_schedule_new_req_list` sorts them by used tokens) and its plan fills one member after another
  (`_get_batch_prefill_migration_plan`); the ring leaves each token's KV where the plan puts it. Placing on a
  decoding instance would force it into the ring, which LoongServe does only when its model says the prefill
  gains more than the decode batch loses (backend.py adds such members by that rule). The Scheduler asks
  `placement_fits` first, so a prompt that this placement cannot take waits without allocating.
- Scale-up: a decoding request whose master is full gets its next rBlock where its KV tail is, else on an idle
  instance, else on the one with the most room (RManager.append_block with the same hint); old KV never moves.
- No gManager: LoongServe places KV at prefill and never rebalances it by moves, so neither Algorithm 1's moves,
  DGFM nor a debtor's retrieval of borrowed blocks run (`runs_gmanager` False; the Scheduler's `retrieval` brings
  nothing home).
"""
from functools import partial

from reference_impl.control.sequence import Sequence
from reference_impl.errors import InputError
from reference_impl.sim.policy import Policy


def _no_retrieval(room: int) -> int:
    return 0


class LoongServePolicy(Policy):
    def __init__(self, sim):
        super().__init__(sim)
        sim.backend.attach(sim.engine, lambda: sim.last_s)
        for inst in sim.engine.instances:
            inst.scheduler.recommend = self.idle_others
            inst.scheduler.retrieval = _no_retrieval
            inst.scheduler.placement_fits = partial(self.placement_fits, inst.rm)

    @property
    def runs_gmanager(self) -> bool:
        return False

    def dispatch(self, seq: Sequence) -> int | None:
        engine, now, prefill_until = self.sim.engine, self.sim.last_s, self.sim.backend.prefill_until
        try:
            engine.config.check_fits(seq)
        except InputError:
            return None
        master = min(engine.instances, key=lambda i: (prefill_until[i.inst_id] > now,
                                                      i.scheduler.num_waiting_blocks - i.rm.num_free,
                                                      len(i.scheduler.running), i.inst_id))
        master.scheduler.add(seq)
        return master.inst_id

    def idle_others(self, debtor: int, num_blocks: int = 0) -> list[int]:
        """Where `debtor`'s request places the rBlocks its own room cannot take: the idle instances, freest first."""
        now, prefill_until = self.sim.last_s, self.sim.backend.prefill_until
        idle = [inst.rm for inst in self.sim.engine.instances if inst.inst_id != debtor
                and not inst.scheduler.running and prefill_until[inst.inst_id] <= now]
        return [rm.inst_id for rm in sorted(idle, key=lambda rm: (-rm.num_free, rm.inst_id))]

    def placement_fits(self, rm, seq: Sequence, num_blocks: int) -> bool:
        """Whether the master `rm` and the instances `idle_others` names can take `num_blocks` now (all instances,
        for a prompt larger than the master: RManager.alloc_prompt's rule)."""
        if num_blocks <= rm.num_free:
            return True
        if num_blocks > rm.pool.num_capacity:
            return rm.can_admit(num_blocks, True)
        rms = self.sim.engine.rmanagers
        return num_blocks <= rm.num_free + sum(rms[i].num_lendable for i in self.idle_others(rm.inst_id))

    def finish(self) -> None:
        backend = self.sim.backend
        model = backend.prefill_model
        self.sim.result.design_counters.update(backend.counters.as_dict(model.fit_err_mean, model.fit_err_max))
