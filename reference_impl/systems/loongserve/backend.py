"""LoongServe's steps on the simulator: a prefill runs sequence-parallel on a group of instances (sp_cost.py), the
group chosen per prefill by LoongServe's analytic model (analytic.py); every member is busy for the prefill's
duration, so its own next step waits for it (`busy_until`); decode is the base backend's, whose remote
MicroAttention is LoongServe's multi-master decode.

Multi-master decode: a request's master sends its query to the instances holding its KV, each attends over its
share and returns (out, lse), the master merges them. SimBackend already prices exactly this: the holders' KV reads
(Eq. 6's creditor term, and the wait for the slowest), and per layer the queries out and (out, lse) back on the link
(InstanceLoad.num_remote_queries in CalibratedPerfModel.layer_time_s); nothing is added here but the counters.
"""
from dataclasses import replace

from reference_impl.control.instance import Instance
from reference_impl.control.sequence import Sequence
from reference_impl.sim.backend import Pending, SimBackend, StepOutcome
from reference_impl.sim.config import blocks_per_instance, perf_model
from reference_impl.systems.loongserve.analytic import Candidate, PrefillModel, choose_group, prefill_model_for
from reference_impl.systems.loongserve.counters import LoongServeCounters
from reference_impl.systems.loongserve.knobs import LoongServeKnobs
from reference_impl.systems.loongserve.sp_cost import batch_shape, ring_prefill


class LoongServeBackend(SimBackend):
    """It reads the run's clock and the other instances' batches through the policy's StepHooks.cluster."""

    def __init__(self, config, records, **kwargs):
        super().__init__(config, records, **kwargs)
        knobs = config.design_knobs or LoongServeKnobs()
        n = config.engine.num_instances
        self.ring_model = self.model if knobs.ring_link is None else perf_model(replace(config, link=knobs.ring_link))
        max_tokens = n * blocks_per_instance(config, self.model) * config.engine.block_size
        degree = min(n, knobs.max_degree or n)
        self.prefill_model: PrefillModel = prefill_model_for(self.ring_model, degree, max_tokens)
        self.busy_until = [0.0] * n  # when each instance's step in flight, or the prefill group it is in, ends
        self.prefill_until = [0.0] * n  # when the last prefill group each instance was in ends
        self.counters = LoongServeCounters()
        self._num_holders: dict[int, int] = {}  # req_id -> instances holding its KV at its last step
        self.cluster = None if self.hooks is None else self.hooks.cluster
        self.clock = (lambda: 0.0) if self.cluster is None else self.cluster.now_s

    def execute(self, instance: Instance, seqs: list[Sequence], is_prefill: bool,
                co_running: float = 0.0) -> StepOutcome:
        now, i = self.clock(), instance.inst_id
        if is_prefill and not self.prefill_elsewhere:
            outcome = self._ring_prefill(instance, seqs, co_running, now)
        else:
            wait_s = max(0.0, self.busy_until[i] - now)  # its instance is in another master's prefill group
            self._count_decode(instance.rm, [s for s in seqs if not s.chunk_tokens])
            outcome = super().execute(instance, seqs, is_prefill, co_running)
            self.counters.member_wait_s += wait_s
            outcome.duration_s += wait_s
        self.busy_until[i] = now + outcome.duration_s
        return outcome

    def _ring_prefill(self, instance: Instance, seqs: list[Sequence], co_running: float, now: float) -> StepOutcome:
        rm, i = instance.rm, instance.inst_id
        lengths = [seq.num_tokens for seq in seqs]
        holders = {h for seq in seqs for h in rm.holders(seq.req_id)}
        group = self._group(i, holders, lengths, {seq.req_id for seq in seqs}, now)
        start_s = max(now, max(self.busy_until[j] for j in group))
        ring = ring_prefill(self.ring_model, len(group), *batch_shape(lengths))
        compute_s = ring.duration_s * (1.0 + (self.costs.co_run_slowdown - 1.0) * co_running)
        paid, self.pending[i] = self.pending[i], Pending()
        compute_s += paid.owed_s + self.costs.peer_call_s * paid.num_peer_calls
        end_s = start_s + max(compute_s, self.model.kv_transfer_s(paid.sent_tokens))
        for j in group:
            self.busy_until[j] = self.prefill_until[j] = end_s
        c = self.counters
        c.degrees[len(group)] += 1
        c.ring_hop_bytes += ring.hop_bytes
        self.meter.step_s += ring.duration_s * len(group)  # every member's step time
        self.meter.prefill_step_s += ring.duration_s * len(group)
        c.member_wait_s += start_s - now
        for seq in seqs:
            self._num_holders[seq.req_id] = len(rm.holders(seq.req_id))
        return StepOutcome(seqs, [], end_s - now, len(seqs), paid)

    def _group(self, master: int, holders: set[int], lengths: list[int], batch: set[int], now: float) -> list[int]:
        """The master first, then the instances that hold the batch's KV, then those LoongServe's model adds."""
        def candidate(j: int) -> Candidate:
            outputs = [len(s.output_ids) for s in self.cluster.engine.instances[j].scheduler.running if s.req_id not in batch]
            weight = len(outputs) ** 2 / max(1, sum(outputs)) if outputs else 0.0
            return Candidate(j, max(0.0, self.busy_until[j] - now), weight)
        members = [candidate(master)] + [candidate(j) for j in sorted(holders - {master})]
        others = [candidate(j) for j in range(len(self.busy_until)) if j != master and j not in holders]
        return choose_group(self.prefill_model, lengths, members, others)

    def _count_decode(self, rm, decodes: list[Sequence]) -> None:
        """Scale-ups (a request's KV reached one more instance since its last step) and the query/(out, lse)
        bytes of its remote MicroAttention."""
        model, known, queries = self.model, self._num_holders, 0
        for seq in decodes:
            holders = rm.holders(seq.req_id)
            n = len(holders)
            if n > known.get(seq.req_id, n):
                self.counters.scale_ups += 1
            known[seq.req_id] = n
            queries += n - (rm.inst_id in holders)
        self.counters.remote_exchange_bytes += (queries * (model.query_bytes + model.result_bytes)
                                                * model.num_layers * model.tp)
