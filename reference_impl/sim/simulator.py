"""The simulator: a discrete-event clock over the engine's own control plane, step times from the cost model.

    from reference_impl.sim.simulator import simulate
        from reference_impl.systems.registry import cluster, system_config
    config = cluster("llama2-7b", "A100-80GB-SXM", num_gpus=32)    # Infinite-LLM: 32 instances of tp=1
    result = simulate(config, requests, design=design("infinite-llm"))  # requests: workloads.Request list
    vllm_m = system_config("vllm-m", config)     # pooling off: oversize requests are rejected
    result = simulate(vllm_m, requests, design=design("vllm-m"))
    # (reference_impl.systems.run.simulate(config, requests) looks the design of config.design up and does this)
    result.requests        # RequestRecord per request: status, inst_id, first_token_s, finish_s, preemptions
    result.summary()       # output_tok_s, mean/p99 latency, counts finished/rejected/unfinished
    result.throughput_over_time(bin_s=1.0, inst_ids=None)   # (bin start [n], tokens/s [n])

The simulator imports no design: the caller hands it the Design (systems/design.py) whose policy and backend run
the cluster. `Simulator` owns the event heap, the time and the limit (Vidur's shape); each event (events.py) handles itself on
it and returns the events it causes. Each instance steps on its own clock: a step lasts what the cost model gives
for what it does (backend.py); the instance's state changes when the step starts and its tokens count when it
ends. Same config and requests, same result, bit for bit: ties break by event order; no wall clock is read.
`ServingRun.idle_waiting_frac`: the share of instance-time with no step running while some waiting request's KV
fit the cluster's free rBlocks.
"""
from __future__ import annotations

import gc
import heapq
import itertools
from typing import Protocol

from reference_impl.control.memo import Memo
from reference_impl.control.sequence import Sequence
from reference_impl.errors import InputError
from reference_impl.serving.records import FINISHED, REJECTED, RequestRecord, ServingRun, drain_rank
from reference_impl.sim.backend import SimBackend, StepOutcome, build_engine
from reference_impl.sim.config import SimConfig
from reference_impl.sim.events import MAX_NOOP_STEPS_PER_INSTANT, Arrival, Event, GManagerRound, Handoff, Step
from reference_impl.sim.policy import Cluster, Policy


class Design(Protocol):
    """What the simulator reads of a design (systems/design.py's Design): its name (the config's `design`), the
    policy that makes its decisions and the backend that prices its steps."""
    name: str
    policy: type[Policy]
    backend: type[SimBackend]

GC_YOUNG_THRESHOLD = 50_000


class Simulator:
    """One run: the event heap, the time and the limit, and the cluster the events act on (the engine on a
    SimBackend, the requests' records, which instances have a step in flight, the idle-while-work-waits time)."""

    def __init__(self, config: SimConfig, requests, *, design: Design, max_sim_s: float = float("inf"),
                 on_event=None, on_round=None, prefill_elsewhere: bool = False, steady_only: bool = False):
        if design.name != config.design:
            raise InputError(f"the design handed to the simulator ({design.name}) is not the config's "
                             f"({config.design})")
        self.config = config
        self.num_instances = config.engine.num_instances
        self.max_sim_s = max_sim_s  # lowered to the steady-state window's end once known, with steady_only
        self.on_event, self.on_round = on_event, on_round
        self.records = {r.req_id: RequestRecord(r.req_id, r.arrival_s, r.prompt_len, r.output_len) for r in requests}
        self.result = ServingRun(list(self.records.values()))
        self.design = design
        self.last_s = 0.0
        self.start_s: float | None = None
        # the design's policy first: it gives its hooks to the backend's and the engine's constructors
        self.policy = design.policy(config, Cluster(self))
        self.backend: SimBackend = design.backend(config, self.records, hooks=self.policy.step_hooks(),
                                                  prefill_elsewhere=prefill_elsewhere)
        self.engine = build_engine(config, self.backend, self.policy.placement())
        self.seqs: dict[int, Sequence] = {}
        self.busy = [False] * config.engine.num_instances  # a step event is queued
        self.computing = [False] * config.engine.num_instances  # ... and it runs work (not only a KV transfer)
        self.num_computing = 0  # of `computing`, kept as it changes
        self.shares_cores = self.backend.costs.co_run_slowdown != 1.0 and config.engine.num_instances > 1
        self.noop_steps = [(None, 0)] * config.engine.num_instances  # (instant, steps that did nothing at it)
        self.pending = self.arrivals_left = len(requests)
        self.idle_rounds = 0
        # rounds on an empty cluster may be counted instead of run (events.GManagerRound) unless a callback
        # watches every round or event, or the run stops at a time limit
        self.skip_idle_rounds = on_round is None and on_event is None and max_sim_s == float("inf")
        self._fits_at = (None, None, False)  # (queue changes, memory changes, waiting_fits() then)
        self.idle_waiting_inst_s = 0.0
        self.changes = self.engine.changes
        self._schedulers = [inst.scheduler for inst in self.engine.instances]
        # instances that may have work and no step queued (wake_all checks): those whose step ended without a next
        # one, and those whose queues changed since the last wake_all (`_queues_changed`)
        self._may_wake: set[int] = set()
        self._queues_changed = self.changes.reader(config.engine.num_instances, memory=False)
        self.quiet_handoff = Memo()  # (changes, instances) of a Handoff that did nothing
        # the events: the arrivals in their own list, latest first (they are all known now, and queued before any
        # other event, so at one instant they come first), and the heap of the rest; ties break by queueing order
        self._arrivals = [Arrival(r.arrival_s, r)
                          for r in sorted(requests, key=lambda r: (r.arrival_s, r.req_id), reverse=True)]
        self._queue: list[tuple[float, int, Event]] = []
        self._order = itertools.count()
        self._steady = _SteadyEnd(requests) if steady_only and requests else None
        if self.policy.runs_gmanager:
            self.schedule([GManagerRound(0.0)])
        self.schedule(self.policy.start())

    def schedule(self, events: list[Event]) -> None:
        for event in events:
            heapq.heappush(self._queue, (event.time_s, next(self._order), event))

    def next_event_s(self) -> float:
        arrival_s = self._arrivals[-1].time_s if self._arrivals else float("inf")
        return min(arrival_s, self._queue[0][0]) if self._queue else arrival_s

    def run(self) -> ServingRun:
        """Handle the earliest event until no request is pending, no event is left or the limit passed."""
        queue, order, arrivals = self._queue, self._order, self._arrivals
        while self.pending:
            if arrivals and (not queue or arrivals[-1].time_s <= queue[0][0]):
                event = arrivals.pop()
                time_s = event.time_s
            elif queue:
                time_s, _, event = heapq.heappop(queue)
            else:
                break
            if time_s > self.max_sim_s:
                break
            self._advance_to(time_s)
            for caused in event.handle(self):
                heapq.heappush(queue, (caused.time_s, next(order), caused))
            if self.on_event is not None:
                self.on_event(time_s)
        for record in self.records.values():
            if record.status != FINISHED and record.req_id in self.seqs:
                record.num_preemptions = self.seqs[record.req_id].num_preemptions
        self.result.num_moved_blocks = self.backend.num_moved_blocks
        self.result.idle_waiting_frac = self.idle_waiting_frac()
        self.result.peak_batch_size = max(i.scheduler.peak_running for i in self.engine.instances)
        self.policy.finish()
        return self.result

    # --- what the events call
    def arrived(self, seq: Sequence, inst_id: int | None) -> None:
        """A request arrived and was dispatched to `inst_id` (None: rejected, the cluster cannot hold it)."""
        self.arrivals_left -= 1
        if not self.arrivals_left and self._steady is not None:
            self._may_stop_at_steady_end()
        record = self.records[seq.req_id]
        if inst_id is None:
            record.status = REJECTED
            self.pending -= 1
        else:
            self.seqs[seq.req_id] = seq
            record.inst_id = inst_id

    def record_step(self, inst_id: int, outcome: StepOutcome, end_s: float) -> None:
        """A step that ran a batch and ends at `end_s`: its tokens on the timeline, the peer calls it paid for, first
        tokens and the requests that finished on their records."""
        result = self.result
        result.step_end_s.append(end_s)
        result.step_tokens.append(outcome.num_tokens)
        result.step_inst.append(inst_id)
        result.num_steps += 1
        result.num_peer_calls += outcome.paid.num_peer_calls
        records = self.records
        for seq in outcome.seqs:
            if len(seq.output_ids) == 1 and records[seq.req_id].first_token_s is None:
                records[seq.req_id].first_token_s = end_s
        for seq in outcome.finished:
            record = records[seq.req_id]
            record.status, record.finish_s, record.num_preemptions = FINISHED, end_s, seq.num_preemptions
            self.pending -= 1
            if self._steady is not None:
                self._steady.finished(end_s)
                self._may_stop_at_steady_end()

    def _may_stop_at_steady_end(self) -> None:
        end_s = self._steady.end_s() if not self.arrivals_left else None
        if end_s is not None:
            self.max_sim_s = min(self.max_sim_s, end_s)

    def stepping(self, inst_id: int, is_busy: bool, is_computing: bool) -> None:
        """Whether `inst_id` has a step queued now, and whether that step runs work (not only a KV transfer)."""
        self.num_computing += is_computing - self.computing[inst_id]
        self.busy[inst_id], self.computing[inst_id] = is_busy, is_computing
        if not is_busy:
            self._may_wake.add(inst_id)

    def co_running(self, inst_id: int) -> float:
        """The share of the other instances with a computing step in flight (where instances share cores)."""
        return (self.num_computing - self.computing[inst_id]) / (self.config.engine.num_instances - 1)

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
        self.records[inst.scheduler.waiting[0].req_id].inst_id = inst.inst_id
        return [] if time_s is None else self.wake(inst.inst_id, time_s)

    def wake_all(self, time_s: float) -> list[Event]:
        """A step for every instance with work, except those whose step could only hand their first request on
        (Scheduler.waits_for_others): one Handoff event after the steps does that for them."""
        steps, parked, busy, pending, schedulers = [], [], self.busy, self.backend.pending, self._schedulers
        # (a fresh set each call: a set keeps its largest table when members leave, and sorting it walks all of it)
        candidates, self._may_wake = self._may_wake | self._queues_changed.take(), set()
        for i in sorted(candidates):
            s = schedulers[i]
            if busy[i] or not (s.running or s.waiting):
                continue  # (dropped until its step ends or its queues change)
            self._may_wake.add(i)
            if not s.running and s.waits_for_others and not pending[i].sent_tokens:
                parked.append(i)
            else:
                steps += self.wake(i, time_s)
        return steps + [Handoff(time_s, tuple(parked))] if parked else steps

    def round_done(self, time_s: float | None) -> None:
        """A gManager round ran at `time_s` (None: an empty round counted, not run)."""
        self.result.num_gmanager_rounds += 1
        if time_s is not None and self.on_round is not None:
            self.on_round(time_s, self.engine)

    def count_idle_round(self) -> int:
        """Rounds in a row with no instance computing and no arrival left, this one included."""
        self.idle_rounds = 0 if self.num_computing or self.arrivals_left else self.idle_rounds + 1
        return self.idle_rounds

    def may_skip_rounds(self) -> bool:
        """Only arrivals are queued on an empty cluster, and no callback watches every round or event."""
        return bool(self.arrivals_left) and self.skip_idle_rounds and self.is_empty()

    def is_empty(self) -> bool:
        """No step in flight, no request or KV anywhere, nothing for the next heartbeat to report."""
        if any(self.busy) or self.engine.gmanager.entries or self.engine.gmanager.frozen:
            return False
        return not any(i.has_work or not i.rm.is_empty for i in self.engine.instances)

    # --- the idle-while-work-waits time
    def _advance_to(self, time_s: float) -> None:
        """The clock moves to the next event's `time_s`: the time since the last event counts as idle-while-work-waits
        for each instance computing nothing in the state that event left, if some waiting request fits."""
        if self.start_s is None:
            self.start_s = time_s
        if time_s != self.last_s:
            num_idle = self.num_instances - self.num_computing
            if num_idle and self._waiting_fits_now():
                self.idle_waiting_inst_s += num_idle * (time_s - self.last_s)
            self.last_s = time_s
        if time_s > self.result.end_s:
            self.result.end_s = time_s

    def _waiting_fits_now(self) -> bool:
        """waiting_fits, read again only when the queues or memory changed (most events change neither)."""
        changes = self.changes
        if changes.queues != self._fits_at[0] or changes.memory != self._fits_at[1]:
            self._fits_at = (changes.queues, changes.memory, self.waiting_fits())
        return self._fits_at[2]

    def waiting_fits(self) -> bool:
        """Some waiting request's KV (its tokens so far) fits the cluster's free rBlocks."""
        need = self.engine.min_waiting_blocks()
        return need is not None and need <= self.engine.num_free()

    def idle_waiting_frac(self) -> float:
        span_s = self.last_s - (self.start_s or 0.0)
        return self.idle_waiting_inst_s / (span_s * self.config.engine.num_instances) if span_s > 0 else 0.0


class _SteadyEnd:
    """Where a run's steady-state window (serving/records.py) ends, known before the run does: at the later of
    the last arrival and the drain_rank-th smallest finish time. Steps are recorded when they start, so once the
    clock passes that time no later finish can come before it and the window's tokens are all recorded. (The
    window is not empty then: one of the first drain_rank requests to finish arrived after the warm-up.)"""

    def __init__(self, requests):
        self.last_arrival_s = max(r.arrival_s for r in requests)
        self.rank = drain_rank(len(requests))
        self._smallest: list[float] = []  # the `rank` smallest finish times so far, negated (a max-heap)

    def finished(self, finish_s: float) -> None:
        if len(self._smallest) < self.rank:
            heapq.heappush(self._smallest, -finish_s)
        elif -finish_s > self._smallest[0]:
            heapq.heapreplace(self._smallest, -finish_s)

    def end_s(self) -> float | None:
        """The window's end, once `rank` requests have finished (None before)."""
        if len(self._smallest) < self.rank:
            return None
        return max(self.last_arrival_s, -self._smallest[0])


def simulate(config: SimConfig, requests, *, design: Design, max_sim_s: float = float("inf"), on_event=None,
             on_round=None, prefill_elsewhere: bool = False, steady_only: bool = False) -> ServingRun:
    """Serve `requests` (objects with req_id, arrival_s, prompt_len, output_len) on the cluster of `config`, run by
    `design`, until every request finished, was rejected, or is stuck, or `max_sim_s` passed; `on_event(now_s)` is
    called after each event and `on_round(now_s, engine)` after each gManager round. `prefill_elsewhere`: prompts arrive
    with their KV computed by a separate prefill pool, so prefill steps take no time here (their KV is still
    allocated, spilled and placed by the engine as usual): for studying decode-phase memory behaviour at lengths
    whose prefill alone would take minutes. `steady_only`: stop once the steady-state window has ended; its
    rates (`steady_output_tok_s`, `steady_total_tok_s`) are the full run's, bit for bit, while latencies and
    counts miss the requests still running (for probes, which read only the steady rate)."""
    threshold = gc.get_threshold()
    # the event loop allocates many short-lived objects and leaves few cycles: collecting the youngest
    # generation every 700 allocations (Python's default) took 4-6% of a 32-instance point
    gc.set_threshold(GC_YOUNG_THRESHOLD, *threshold[1:])
    try:
        return Simulator(config, requests, design=design, max_sim_s=max_sim_s, on_event=on_event, on_round=on_round,
                         prefill_elsewhere=prefill_elsewhere, steady_only=steady_only).run()
    finally:
        gc.set_threshold(*threshold)
