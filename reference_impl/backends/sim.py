"""Sim backend: a discrete-event clock over the engine's own control plane, step times from the cost model.

    from reference_impl.backends.sim import simulate
    from reference_impl.sim.config import SimConfig
    from reference_impl.sim.baselines import vllm_m, vllm_s
    config = SimConfig(model="llama2-7b", gpu="A100-80GB-SXM", num_instances=32, tp=1)  # Infinite-LLM
    result = simulate(config, requests)          # requests: workloads.Request list (arrival_s, prompt/output len)
    result = simulate(vllm_m(config), requests)  # same instances, pooling off: oversize requests are rejected
    result = simulate(vllm_s(config), requests)  # one instance of all GPUs, TP in a node, PP across nodes
    result.requests        # RequestRecord per request: status, inst_id, first_token_s, finish_s, preemptions
    result.summary()       # output_tok_s, mean/p99 latency, counts finished/rejected/unfinished
    result.throughput_over_time(bin_s=1.0, inst_ids=None)   # (bin start [n], tokens/s [n])

Events (sim/events.py, one class per kind whose handler returns the events it causes): Arrival (capacity
check: Engine.check_fits; dispatch to the most free memory: Engine.add_request), Step (Instance.step: one
KV-move chunk, schedule, execute, postprocess; then a blocked waiting request may go to an instance that can
admit it, and idle instances take waiting work that fits: Engine.redispatch, Engine.fill_idle), and
GManagerRound (heartbeats, recalls, Algorithm 1, DGFM). Each instance steps on its own clock: a step's
duration is `step_time_s` of the calibrated model for what the step does; the instance's state changes when
the step starts and its tokens count when it ends. Model of time:
- decode: batch = the step's requests; KV read = every block physically on this instance (own requests'
  and the remote requests it hosts: Eq. 6's creditor term); remote queries = (request, creditor) pairs.
- prefill: prompt tokens (non-attention) plus causal attention pairs, split by where the request's blocks
  are (the engine's split causal prefill); a creditor's share is added to its next step. With chunked
  prefill a step carries both: the decode batch and prompt chunks (pairs against the prompt's prefix).
- KV moves and DGFM swaps: transfer time on the link, overlapped with the source's next step (max of both).
Same config and requests, same result, bit for bit: ties break by event order; no wall clock is read.
`ServingRun.idle_waiting_frac`: the share of instance-time with no step running while some waiting request's
KV fit the cluster's free rBlocks.
"""
from reference_impl.engine import Engine, EngineConfig
from reference_impl.gmanager import GManagerConfig
from reference_impl.perf_model import InstanceLoad, causal_prefill_pairs, step_time_s
from reference_impl.rmanager import MEMORY_CLOCK
from reference_impl.scheduler import QUEUE_CLOCK
from reference_impl.sequence import Sequence, num_blocks_for
from reference_impl.sim.config import SimConfig, blocks_per_instance, perf_model
from reference_impl.sim.events import (MAX_NOOP_STEPS_PER_INSTANT, Arrival, Event, GManagerRound, Handoff, PromptIds,
                                      Step, run_events)
from reference_impl.serving.records import FINISHED, RequestRecord, ServingRun

_PromptIds = PromptIds  # earlier name, used by experiments


class SimBackend:
    """The engine's Backend: execute() returns dummy tokens and computes how long the step takes."""

    supports_chunked_prefill = True

    def __init__(self, config: SimConfig, metrics: dict[int, RequestRecord], result: ServingRun, *,
                 prefill_elsewhere: bool = False):
        self.config = config
        self.prefill_elsewhere = prefill_elsewhere
        self.model = perf_model(config)
        self.metrics = metrics
        self.result = result
        self.now_s = 0.0
        self.duration_s: float | None = None
        self.extra_s: dict[int, float] = {}  # creditors' share of others' prefill attention, due next step
        self.move_tokens: dict[int, int] = {}  # KV tokens each instance sent, overlapped with its next step

    def copy_blocks(self, pairs) -> None:
        for src, _ in pairs:
            self.move_tokens[src.inst_id] = self.move_tokens.get(src.inst_id, 0) + self.config.block_size
        self.result.num_moved_blocks += len(pairs)

    def execute(self, instance, seqs: list[Sequence], is_prefill: bool) -> list[int]:
        rm, bs, model = instance.rm, self.config.block_size, self.model
        if is_prefill:  # whole prompts
            chunks, decodes = [(seq, 0, seq.num_tokens) for seq in seqs], []
        else:  # decode steps, and prompt chunks when prefill is chunked
            chunks = [(s, s.num_tokens - s.prefill_left - s.chunk_tokens, s.chunk_tokens)
                      for s in seqs if s.chunk_tokens]
            decodes = [s for s in seqs if not s.chunk_tokens]
        if self.prefill_elsewhere:  # the prompt's KV arrives ready from a separate prefill pool (not modelled)
            chunks = []
        prefill_tokens, local_pairs, remote_s, remote_queries = self._prefill_share(rm, chunks)
        decode_queries, remote_wait_s = self._decode_share(rm, decodes)
        remote_queries += decode_queries
        load = InstanceLoad(batch_size=len(decodes), attn_kv_tokens=rm.pool.num_used * bs if decodes else 0,
                            num_remote_queries=remote_queries, prefill_tokens=prefill_tokens,
                            prefill_attn_pairs=int(local_pairs))
        compute_s = step_time_s(model, load) if prefill_tokens or decodes else 0.0
        local_attn_s = model.num_layers * local_pairs * model.prefill_attn_s_per_pair
        compute_s += max(0.0, remote_s - local_attn_s, remote_wait_s)  # waits for the slowest creditor
        compute_s += self.extra_s.pop(rm.inst_id, 0.0)
        move_s = model.kv_transfer_s(self.move_tokens.pop(rm.inst_id, 0))
        self.duration_s = max(compute_s, move_s)
        end_s = self.now_s + self.duration_s
        num_tokens = 0
        for seq in seqs:
            if seq.prefill_left:
                continue  # a prompt chunk that does not end the prompt yields no token
            num_tokens += 1
            if not seq.output_ids and self.metrics[seq.req_id].first_token_s is None:
                self.metrics[seq.req_id].first_token_s = end_s
        self.result.step_end_s.append(end_s)
        self.result.step_tokens.append(num_tokens)
        self.result.step_inst.append(rm.inst_id)
        self.result.num_steps += 1
        return [0] * len(seqs)

    def _prefill_share(self, rm, chunks) -> tuple[int, float, float, int]:
        """Prompt tokens, local causal attention pairs, the slowest creditor's share (s) and remote queries of
        prompt chunks (seq, first token, tokens); each creditor's share is added to its next step."""
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
                    t = model.num_layers * pairs * share / total * model.prefill_attn_s_per_pair
                    self.extra_s[inst_id] = self.extra_s.get(inst_id, 0.0) + t
                    remote_s = max(remote_s, t)
        return prompt_tokens, local_pairs, remote_s, remote_queries

    def _decode_share(self, rm, seqs) -> tuple[int, float]:
        """Remote queries of a decode batch, and how long the slowest creditor's MicroAttention outlasts the
        local one (creditors run in parallel)."""
        bs = self.config.block_size
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
                m = self.metrics[seq.req_id]
                m.max_creditors = max(m.max_creditors, creditors)
        if not remote_tokens:
            return remote_queries, 0.0
        slowest = max(remote_tokens.values())
        return remote_queries, self.model.num_layers * self.model.kv_read_s_per_token * max(0, slowest - local_tokens)


def build_engine(config: SimConfig, backend: SimBackend) -> Engine:
    engine_config = EngineConfig(
        num_instances=config.num_instances, blocks_per_instance=blocks_per_instance(config),
        block_size=config.block_size, max_batch_size=config.max_batch_size, pooling=config.pooling,
        max_lent_blocks=config.max_lent_blocks, move_chunk_tokens=config.move_chunk_tokens,
        chunked_prefill_tokens=config.chunked_prefill_tokens,
        gmanager_interval_steps=0, dgfm=config.dgfm, exclusive_roles=config.exclusive_roles, seed=config.seed)
    gm_config = GManagerConfig(block_size=config.block_size,
                               instances_per_node=max(1, 8 // (config.tp * config.pp)),
                               max_k_evals=config.max_k_evals, exclusive_roles=config.exclusive_roles,
                               num_candidates=config.num_candidates or config.num_instances)
    return Engine(engine_config, backend, gmanager_config=gm_config, perf_model=perf_model(config))


class SimState:
    """What the events act on: the engine, the per-request records, which instances have a step in flight,
    and the idle-while-work-waits clock."""

    def __init__(self, config: SimConfig, requests, on_round=None, prefill_elsewhere: bool = False):
        self.config = config
        self.metrics = {r.req_id: RequestRecord(r.req_id, r.arrival_s, r.prompt_len, r.output_len) for r in requests}
        self.result = ServingRun(list(self.metrics.values()))
        self.backend = SimBackend(config, self.metrics, self.result, prefill_elsewhere=prefill_elsewhere)
        self.engine = build_engine(config, self.backend)
        self.on_round = on_round
        self.seqs: dict[int, Sequence] = {}
        self.busy = [False] * config.num_instances  # a step event is queued
        self.noop_steps = [(None, 0)] * config.num_instances  # (instant, steps that did nothing at it)
        self.computing = [False] * config.num_instances  # ... and it runs work (not only a KV transfer)
        self.pending = self.arrivals_left = len(requests)
        self.idle_rounds = 0
        self.start_s: float | None = None
        self.last_s = 0.0
        self.num_idle_waiting = 0  # instances running no step while a waiting request fits the free rBlocks
        self._free_at = (-1, 0)  # (MEMORY_CLOCK count, free rBlocks of the cluster)
        self._need_at = (-1, None)  # (QUEUE_CLOCK count, fewest rBlocks a waiting request needs)
        self.quiet_handoff = None  # (MEMORY_CLOCK, QUEUE_CLOCK, instances) of a Handoff that did nothing
        self.idle_waiting_inst_s = 0.0
        # rounds on an empty cluster may be counted instead of run (events.GManagerRound) unless a callback
        # watches every round or event
        self.skip_idle_rounds = on_round is None

    def wake(self, inst_id: int, time_s: float) -> list[Step]:
        if self.busy[inst_id] or not self.engine.instances[inst_id].has_work:
            return []
        if self.noop_steps[inst_id] == (time_s, MAX_NOOP_STEPS_PER_INSTANT):
            return []  # (events.MAX_NOOP_STEPS_PER_INSTANT)
        self.busy[inst_id] = True
        return [Step(time_s, inst_id)]

    def count_noop_step(self, inst_id: int, time_s: float) -> None:
        at_s, count = self.noop_steps[inst_id]
        self.noop_steps[inst_id] = (time_s, count + 1 if at_s == time_s else 1)
        if self.noop_steps[inst_id][1] == MAX_NOOP_STEPS_PER_INSTANT:
            self.result.num_stalled_instants += 1

    def handed(self, inst, time_s: float | None) -> list[Step]:
        """`inst` got a request at the front of its queue (redispatch, fill_idle): record where it waits now and
        wake the instance (not when `time_s` is None: the caller wakes every instance)."""
        self.metrics[inst.scheduler.waiting[0].req_id].inst_id = inst.inst_id
        return [] if time_s is None else self.wake(inst.inst_id, time_s)

    def wake_all(self, time_s: float) -> list[Event]:
        """A step for every instance with work, except those whose step could only hand their first request on
        (Scheduler.waits_for_others): one Handoff event after the steps does that for them."""
        steps, parked, busy = [], [], self.busy
        for inst in self.engine.instances:
            i, s = inst.inst_id, inst.scheduler
            if busy[i] or not (s.waiting or s.running):
                continue
            if s.waits_for_others and not self.backend.move_tokens.get(i):
                parked.append(i)
            else:
                steps += self.wake(i, time_s)
        return steps + [Handoff(time_s, tuple(parked))] if parked else steps

    def advance_to(self, time_s: float) -> None:
        if self.start_s is None:
            self.start_s = time_s
        self.idle_waiting_inst_s += self.num_idle_waiting * (time_s - self.last_s)
        self.last_s = self.backend.now_s = time_s
        self.result.end_s = max(self.result.end_s, time_s)

    def after_event(self, time_s: float) -> None:
        num_idle = self.computing.count(False)
        self.num_idle_waiting = num_idle if num_idle and self.waiting_fits() else 0

    def is_empty(self) -> bool:
        """No step in flight, no request or KV anywhere, nothing for the next heartbeat to report."""
        if any(self.busy) or self.engine.gmanager.entries or self.engine.gmanager.frozen:
            return False
        return not any(i.has_work or not i.rm.is_empty for i in self.engine.instances)

    def waiting_fits(self) -> bool:
        """Some waiting request's KV (its tokens so far) fits the cluster's free rBlocks."""
        instances = self.engine.instances
        if self._need_at[0] != QUEUE_CLOCK.now:
            self._need_at = (QUEUE_CLOCK.now, min((n for i in instances if (n := i.scheduler.min_waiting_blocks)
                                                   is not None), default=None))
        need = self._need_at[1]
        if need is None:
            return False
        if self._free_at[0] != MEMORY_CLOCK.now:
            self._free_at = (MEMORY_CLOCK.now, sum(i.rm.num_free for i in instances))
        return need <= self._free_at[1]

    def idle_waiting_frac(self) -> float:
        span_s = self.last_s - (self.start_s or 0.0)
        return self.idle_waiting_inst_s / (span_s * self.config.num_instances) if span_s > 0 else 0.0


def simulate(config: SimConfig, requests, *, max_sim_s: float = float("inf"), on_event=None, on_round=None,
             prefill_elsewhere: bool = False) -> ServingRun:
    """Serve `requests` (objects with req_id, arrival_s, prompt_len, output_len) on the cluster of `config`
    until every request finished, was rejected, or is stuck; `on_event(now_s)` is called after each event and
    `on_round(now_s, engine)` after each gManager round. `prefill_elsewhere`: prompts arrive with their KV
    computed by a separate prefill pool, so prefill steps take no time here (their KV is still allocated,
    spilled and placed by the engine as usual): for studying decode-phase memory behaviour at lengths whose
    prefill alone would take minutes."""
    sim = SimState(config, requests, on_round, prefill_elsewhere)
    if on_event is not None:
        sim.skip_idle_rounds = False
        after = sim.after_event
        sim.after_event = lambda time_s: (after(time_s), on_event(time_s))
    events = [Arrival(r.arrival_s, r) for r in sorted(requests, key=lambda r: (r.arrival_s, r.req_id))]
    if config.pooling:
        events.append(GManagerRound(0.0))
    run_events(sim, events, max_sim_s)
    for m in sim.metrics.values():
        if m.status != FINISHED and m.req_id in sim.seqs:
            m.num_preemptions = sim.seqs[m.req_id].num_preemptions
    sim.result.idle_waiting_frac = sim.idle_waiting_frac()
    return sim.result
