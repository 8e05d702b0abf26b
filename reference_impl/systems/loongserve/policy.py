"""LoongServe's decisions in a simulated run, on the shared control plane (sim/policy.py's hooks).

- Dispatch: a new request's master is an instance in no prefill group now (LoongServe's scheduler gives each
  iteration's new requests to the instances it frees for prefill), the one with the most free memory first.
- Placement at admission and scale-up in decode: placement.py, an instance being "in a prefill group" while the
  backend's last group of it has not ended.
- No gManager: LoongServe places KV at prefill and never rebalances it by moves, so neither Algorithm 1's moves,
  DGFM nor a debtor's retrieval of borrowed blocks run (`runs_gmanager` False; placement.py turns retrieval off).
"""
from reference_impl.control.sequence import Sequence
from reference_impl.control.placement import Placement
from reference_impl.sim.policy import Policy, StepHooks
from reference_impl.systems.loongserve.placement import LoongServePlacement


class LoongServePolicy(Policy):
    def __init__(self, config, cluster):
        super().__init__(config, cluster)
        self.rules = LoongServePlacement(lambda: cluster.engine, self.in_prefill)

    def step_hooks(self) -> StepHooks:
        return StepHooks(cluster=self.cluster)  # the backend reads the clock and the other instances' batches

    def placement(self) -> Placement:
        return self.rules.rules()

    @property
    def runs_gmanager(self) -> bool:
        return False

    def in_prefill(self, inst_id: int) -> bool:
        return self.cluster.backend.prefill_until[inst_id] > self.cluster.now_s()

    def dispatch(self, seq: Sequence) -> int | None:
        engine = self.cluster.engine
        if not engine.config.fits(seq):
            return None
        master = min(engine.instances, key=lambda i: (self.in_prefill(i.inst_id),
                                                      i.scheduler.num_waiting_blocks - i.rm.num_free,
                                                      len(i.scheduler.running), i.inst_id))
        master.scheduler.add(seq)
        return master.inst_id

    def finish(self) -> None:
        backend = self.cluster.backend
        model = backend.prefill_model
        self.cluster.result.design_counters.update(backend.counters.as_dict(backend.meter, model.fit_err_mean,
                                                                        model.fit_err_max))
