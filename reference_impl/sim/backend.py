"""The simulator's backend: what a step of one instance costs on the calibrated model, in place of running it.

Model of time:
- decode: batch = the step's requests; KV read = every block physically on this instance (own requests'
  and the remote requests it hosts: Eq. 6's creditor term); remote queries = (request, creditor) pairs.
- prefill: prompt tokens (non-attention) plus causal attention pairs, split by where the request's blocks
  are (the engine's split causal prefill); a creditor's share is added to its next step. With chunked
  prefill a step carries both: the decode batch and prompt chunks (pairs against the prompt's prefix).
- KV moves and DGFM swaps: transfer time on the link, overlapped with the source's next step (max of both).
- what the engine implementation costs (EngineCosts; measured on the Ray engine of the machine at hand, none for
  the GPU calibrations): a debtor step waits `served_step_s` for each creditor serving it, whose next step pays
  `served_cpu_s` for it; each control-plane call an instance makes on a peer that waits for the reply
  (sim/peer_calls.py) adds `peer_call_s` to its step; instances sharing the machine's cores: a step's compute takes
  `co_run_slowdown` times as long when every other instance computes as it starts, pro rata for some of them.
"""
from dataclasses import dataclass, replace

from reference_impl.calibration.engine_costs import EngineCosts
from reference_impl.calibration.model import CalibratedPerfModel
from reference_impl.control.engine import Engine
from reference_impl.control.instance import Instance
from reference_impl.control.placement import Placement
from reference_impl.calibration.perf_model import InstanceLoad, causal_prefill_pairs
from reference_impl.control.sequence import Sequence
from reference_impl.serving.records import RequestRecord
from reference_impl.sim.config import SimConfig, blocks_per_instance, engine_costs, perf_model
from reference_impl.sim.peer_calls import count_peer_calls


@dataclass(slots=True)
class Pending:
    """What an instance's next step pays for, gathered since its last step: the KV tokens it sent (moves, DGFM
    swaps), whose transfer the step overlaps; its share of the other instances' steps it served (s); its waiting
    calls on peers (sim/peer_calls.py)."""
    sent_tokens: int = 0
    owed_s: float = 0.0
    num_peer_calls: int = 0


NOTHING_PAID = Pending()  # what a step that paid for nothing paid (shared: never changed)
NO_CREDITORS = frozenset()  # of a step that no creditor serves
# A step's compute time is a function of its load alone (InstanceLoad), so the backend keeps it per load of steps
# without prompt tokens (decode batches: few shapes, millions of steps), up to this many loads.
MEMO_LOADS = 1 << 17


@dataclass(slots=True)
class StepMeter:
    """What the instances' steps did, summed over the run (counting only; read by the designs experiment): time
    in steps that ran a batch, of which in those that carried prompt tokens, and the KV tokens creditors read for
    remote decode queries (each token once per step; every layer reads it)."""
    step_s: float = 0.0
    prefill_step_s: float = 0.0
    remote_kv_tokens: int = 0


@dataclass(slots=True)  # (not frozen: one per step, and a frozen dataclass is slower to build)
class StepOutcome:
    """One step of an instance: the batch it ran (empty: none) and the requests that finished; how long it takes
    (None: it ran no batch and sent no KV, so no time passes); the tokens it generated; what it paid for (`paid`);
    and the rBlocks the control plane moved as it began (room freed, as by finished requests)."""
    seqs: list[Sequence]
    finished: list[Sequence]
    duration_s: float | None
    num_tokens: int
    paid: Pending
    num_moved_blocks: int = 0

    @property
    def ran(self) -> bool:
        return bool(self.seqs)


class SimBackend:
    """The engine's backend in the simulator: `step` runs the control plane of one instance step and returns its
    outcome; tokens are dummies. Its `execute` returns a StepOutcome, not tokens, so instances step through `step`,
    not Instance.step. `pending[inst_id]`: what that instance's next step pays for. `records`: per request, where the
    most creditors it had at once is kept."""

    supports_chunked_prefill = True

    def __init__(self, config: SimConfig, records: dict[int, RequestRecord], *,
                 model: CalibratedPerfModel | None = None, costs: EngineCosts | None = None,
                 prefill_elsewhere: bool = False, hooks=None):
        self.config = config
        self.hooks = hooks  # the design's policy's (sim/policy.py StepHooks), for a design's backend
        self.model = perf_model(config) if model is None else model
        self.costs = engine_costs(config) if costs is None else costs
        self.records = records
        self.prefill_elsewhere = prefill_elsewhere
        self.num_moved_blocks = 0  # in all, moves and DGFM swaps
        self.pending = [Pending() for _ in range(config.engine.num_instances)]
        self.meter = StepMeter()
        self.block_size = config.engine.block_size
        self._compute_s: dict[tuple, float] = {}  # InstanceLoad's fields -> compute time of a step (MEMO_LOADS)
        self._tokens = [0] * config.engine.max_batch_size  # dummy tokens, one list (postprocess only reads it)

    def copy_blocks(self, pairs) -> None:
        bs, pending = self.config.engine.block_size, self.pending
        for src, _ in pairs:
            pending[src.inst_id].sent_tokens += bs
        self.num_moved_blocks += len(pairs)

    def step(self, instance: Instance, co_running: float = 0.0) -> StepOutcome:
        """Instance.step on this backend. With no batch to run, the step carries only the KV the instance sent since
        its last step, on the link alone. `co_running`: the share of the other instances computing as it starts
        (EngineCosts.co_run_slowdown)."""
        moved_before = self.num_moved_blocks
        seqs, is_prefill = instance.begin_step(self)
        if not seqs:
            pending = self.pending[instance.inst_id]
            paid, pending.sent_tokens = Pending(sent_tokens=pending.sent_tokens), 0
            duration_s = self.model.kv_transfer_s(paid.sent_tokens) if paid.sent_tokens else None
            return StepOutcome(seqs, [], duration_s, 0, paid, self.num_moved_blocks - moved_before)
        outcome = self.execute(instance, seqs, is_prefill, co_running)
        outcome.num_moved_blocks = self.num_moved_blocks - moved_before
        if len(seqs) > len(self._tokens):  # (a batch above the cap: a request moved in whole)
            self._tokens = [0] * (2 * len(seqs))
        outcome.finished = instance.end_step(seqs, self._tokens)
        return outcome

    def execute(self, instance: Instance, seqs: list[Sequence], is_prefill: bool,
                co_running: float = 0.0) -> StepOutcome:
        rm, model, costs = instance.rm, self.model, self.costs
        if is_prefill:  # whole prompts
            chunks, decodes = [(seq, 0, seq.num_tokens) for seq in seqs], []
            num_tokens = len(seqs)
        elif instance.scheduler.chunked_prefill_tokens is None:  # decode steps only: no step carries a chunk
            chunks, decodes, num_tokens = (), seqs, len(seqs)
        else:  # decode steps, and prompt chunks when prefill is chunked
            chunks = [(s, s.num_tokens - s.prefill_left - s.chunk_tokens, s.chunk_tokens)
                      for s in seqs if s.chunk_tokens]
            decodes = [s for s in seqs if not s.chunk_tokens]
            # a prompt chunk that does not end the prompt yields no token
            num_tokens = len(seqs) - sum(1 for seq, _, _ in chunks if seq.prefill_left)
        if self.prefill_elsewhere:  # the prompt's KV arrives ready from a separate prefill pool (not modelled)
            chunks = ()
        borrowed = decodes and rm.num_borrowed  # (else no home request has rBlocks elsewhere: no remote query)
        creditors: set[int] = set() if chunks or borrowed else NO_CREDITORS
        prefill_tokens, local_pairs, remote_s, remote_queries = (
            self._prefill_share(rm, chunks, creditors) if chunks else (0, 0.0, 0.0, 0))
        remote_wait_s = 0.0
        if borrowed:
            decode_queries, remote_wait_s = self._decode_share(rm, decodes, creditors)
            remote_queries += decode_queries
        if creditors and costs.served_step_s:  # each creditor serving this step: on its next step (its core)
            for inst_id in creditors:           # and on this one's critical path, every layer
                self.pending[inst_id].owed_s += costs.served_cpu_s
            remote_wait_s += costs.served_step_s
        compute_s = 0.0
        if prefill_tokens or decodes:
            load = (len(decodes), len(rm.pool.owner) * self.block_size if decodes else 0, remote_queries,
                    prefill_tokens, int(local_pairs))  # (InstanceLoad's fields)
            compute_s = self._compute_s.get(load)
            if compute_s is None:
                compute_s = model.num_layers * model.layer_time_s(InstanceLoad(*load))  # (perf_model.step_time_s)
                if not prefill_tokens and len(self._compute_s) < MEMO_LOADS:
                    self._compute_s[load] = compute_s
            if co_running:
                compute_s *= 1.0 + (costs.co_run_slowdown - 1.0) * co_running
        if remote_s or remote_wait_s:
            local_attn_s = model.num_layers * local_pairs * model.prefill_attn_s_per_pair
            compute_s += max(0.0, remote_s - local_attn_s, remote_wait_s)  # waits for the slowest creditor
        paid = self.pending[rm.inst_id]
        if paid.sent_tokens or paid.owed_s or paid.num_peer_calls:
            self.pending[rm.inst_id] = Pending()
            compute_s += paid.owed_s + costs.peer_call_s * paid.num_peer_calls
            duration_s = max(compute_s, model.kv_transfer_s(paid.sent_tokens))
        else:  # nothing to pay for (the common step): no fresh Pending, no sums of zeros
            paid, duration_s = NOTHING_PAID, compute_s
        meter = self.meter
        meter.step_s += duration_s
        if prefill_tokens:
            meter.prefill_step_s += duration_s
        return StepOutcome(seqs, [], duration_s, num_tokens, paid)

    def _prefill_share(self, rm, chunks, serving: set) -> tuple[int, float, float, int]:
        """Prompt tokens, local causal attention pairs, the slowest creditor's share (s) and remote queries of
        prompt chunks (seq, first token, tokens); each creditor's share is added to its next step, and the
        creditors to `serving`."""
        model = self.model
        prompt_tokens, local_pairs, remote_s, remote_queries = 0, 0.0, 0.0, 0
        for seq, start, n in chunks:
            prompt_tokens += n
            pairs = causal_prefill_pairs(n, start)
            total = len(rm.tables[seq.req_id])
            holders = rm.holders(seq.req_id)
            local_pairs += pairs * holders.get(rm.inst_id, 0) / total
            for inst_id, share in holders.items():
                if inst_id != rm.inst_id:
                    remote_queries += 1
                    serving.add(inst_id)
                    t = model.num_layers * pairs * share / total * model.prefill_attn_s_per_pair
                    self.pending[inst_id].owed_s += t
                    remote_s = max(remote_s, t)
        return prompt_tokens, local_pairs, remote_s, remote_queries

    def _decode_share(self, rm, seqs, serving: set) -> tuple[int, float]:
        """(Where some home request has rBlocks elsewhere.) Remote queries of a decode batch, and how long the slowest creditor's MicroAttention outlasts the
        local one (creditors run in parallel); the batch's creditors go to `serving`."""
        bs = self.config.engine.block_size
        remote_tokens: dict[int, int] = {}  # creditor -> KV tokens of this batch it reads for us
        local_tokens, remote_queries = 0, 0
        for seq in seqs:
            holders = rm.holders(seq.req_id)
            local_tokens += holders.get(rm.inst_id, 0) * bs
            if len(holders) > 1 or rm.inst_id not in holders:
                creditors = 0
                for inst_id, share in holders.items():
                    if inst_id != rm.inst_id:
                        creditors += 1
                        remote_tokens[inst_id] = remote_tokens.get(inst_id, 0) + share * bs
                remote_queries += creditors
                record = self.records[seq.req_id]
                record.max_creditors = max(record.max_creditors, creditors)
        serving.update(remote_tokens)
        if not remote_tokens:
            return remote_queries, 0.0
        self.meter.remote_kv_tokens += sum(remote_tokens.values())
        slowest = max(remote_tokens.values())
        return remote_queries, self.model.num_layers * self.model.kv_read_s_per_token * max(0, slowest - local_tokens)


def build_engine(config: SimConfig, backend: SimBackend, placement: Placement = Placement()) -> Engine:
    """The engine of `config`'s cluster on `backend` (its cost model also feeds the gManager's Algorithm 1):
    `config.engine` with the rBlocks an instance holds, the gManager's node locality of instances of tp x pp GPUs
    (8 a node), and the design's `placement`. Its rounds run as the simulator's events (events.py), not in steps."""
    engine_config = replace(config.engine, blocks_per_instance=blocks_per_instance(config, backend.model),
                            gmanager=replace(config.engine.gmanager,
                                             instances_per_node=max(1, 8 // (config.tp * config.pp))))
    engine = Engine(engine_config, backend, perf_model=backend.model, placement=placement)
    if backend.costs.peer_call_s:
        count_peer_calls(engine.instances, backend.pending)
    return engine
