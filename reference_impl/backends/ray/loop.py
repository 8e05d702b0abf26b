"""An instance actor's own serving loop, in a thread of the actor; it waits for no instance it shares nothing with.

Each iteration: the control phase (the previous step's postprocess, the inbox of arrivals, `move_kvcache` and
swaps, one chunk of KV moves, the schedule, the step plan, a heartbeat to the gManager), then the step
(exchange.py): each partner of this step gets its part of the plan in a message and serves it in a thread of its
own actor (serve.py), while this loop runs its model with DistAttention over the data plane. A debtor's step so
waits only for its creditors' MicroAttention and the link; a creditor never waits for its debtors.

State: everything here is this loop thread's alone: the rManager, scheduler and instance, the step's exchange,
the holds (holds.py), the gManager link (gm_link.py), the statistics (stats.py) and the snapshot it publishes;
other threads setting any of it get `ForeignWrite` (owned.py). Peers, the gManager, the driver and the actor's
serving threads post messages into the mailbox (messages.py, mailbox.py), which the loop serves at its control
phase, before and after every layer's attention, before the logits and whenever it waits on a peer; they read
only what the loop published (the snapshot, the reports in its outbox). The compute phase reads nothing of the
control plane, only the plan it was given. A wait on the data plane blocks (gloo completes a transfer only inside
`wait`): it waits only for partners' serving threads, which never wait for any loop, so it cannot deadlock.
"""
import os
import time
import traceback
from dataclasses import replace

import ray

from reference_impl.backends.ray.exchange import Exchange, make_batch
from reference_impl.backends.ray.gm_link import GManagerLink
from reference_impl.backends.ray.holds import Holds, carry_out_swap, hold_here
from reference_impl.backends.ray.mailbox import IDLE_WAIT_S, Mailbox
from reference_impl.backends.ray.messages import (Abort, AddRequest, Adopt, Hold, Migrate, Outbox, Reform, Report,
                                                  Served, Stop, Unhold)
from reference_impl.backends.ray.owned import Owned
from reference_impl.backends.ray.peers import RemoteRManager
from reference_impl.backends.ray.rejoin import rejoin
from reference_impl.backends.ray.request_moves import Mover
from reference_impl.backends.ray.snapshot import BROKEN, HELD, REFORMING, RUNNING, STOPPED, Snapshot
from reference_impl.backends.ray.stats import LoopStats
from reference_impl.control.instance import Instance
from reference_impl.control.placement import Placement
from reference_impl.control.protocol import MoveKVCache, Swap
from reference_impl.control.sequence import Status


class InstanceLoop(Owned):
    def __init__(self, inst_id: int, config, model, caches: dict, device, gmanager, handles: dict,
                 heartbeat_interval_s: float = 0.0, placement: Placement = Placement(), moves=None):
        """caches: tier -> (k, v) of this instance; handles: inst_id -> actor handle of every instance;
        heartbeat_interval_s: the least time between two heartbeats (the gManager's rounds need no more);
        placement: a design's placement rules for this instance (control/placement.py); moves: a design's rule
        for moving requests whole to other instances (control/request_move.py RequestMoves; None: none moves)."""
        self.inst_id, self.config, self.model, self.caches, self.device = inst_id, config, model, caches, device
        self.handles = dict(handles)
        self.mailbox, self.outbox = Mailbox(), Outbox()
        self.stats = LoopStats()
        self.instance = Instance.build(inst_id, config, self.recommend, placement=placement)
        self.rm, self.scheduler = self.instance.rm, self.instance.scheduler
        for i, handle in sorted(handles.items()):
            if i != inst_id:
                self.rm.peers[i] = RemoteRManager(i, handle, self.rm, self.wait_ref, self.stats)
        if hasattr(model, "wait"):  # a device-time model: its device time passes while this loop serves mail
            model.wait = self.mailbox.sleep
        self.link = GManagerLink(gmanager, self.instance, self.stats, heartbeat_interval_s)
        self.exchange = Exchange(self)
        self.sequence_parallel = placement.segments is not None  # its prompts' segments prefilled by their members
        self.mover = Mover(self, moves)
        self.holds = Holds()
        self.plane, self.group = None, None  # the data-plane group this loop is in (or joining), its address
        self.inbox: list = []  # arrivals, aborts and the gManager's instructions, for the next control phase
        self.reform: Reform | None = None  # the driver's new group, joined at the next iteration boundary
        self.last = None  # (seqs, token ids) of the step whose postprocess is due
        self.snapshot = Snapshot()
        self.stopping = False
        self.num_added = 0  # requests dispatched here so far (the driver's dispatch counts what is not in yet)

    def claim(self) -> None:
        """The calling thread owns this loop's state from now on."""
        super().claim()
        for part in (self.stats, self.link, self.exchange, self.mover, self.holds):
            part.claim()
        self.mailbox.owner = self._owner

    # --- messages
    def post(self, msg) -> None:
        """From any thread: `msg` (messages.py, or the gManager's MoveKVCache / Swap) for this loop."""
        self.mailbox.post(self.receive, msg)

    def receive(self, msg) -> None:
        match msg:
            case AddRequest() | Abort() | Adopt() | Migrate() | MoveKVCache() | Swap():
                self.inbox.append(msg)
            case Served(compute_s, cpu_s):
                self.stats.num_served += 1
                self.stats.serve_compute_s += compute_s
                self.stats.serve_cpu_s += cpu_s
            case Hold(holder, event):
                self.holds.add(holder, event)
            case Unhold(holder):
                self.holds.release(holder)
            case Reform():
                self.reform = msg
                self.snapshot = replace(self.snapshot, state=REFORMING)
            case Stop():
                self.stopping = True
            case _:
                raise TypeError(f"instance loop: unknown message {msg!r}")

    def take_inbox(self) -> None:
        while self.inbox:  # (a swap serves mail: what comes meanwhile is taken in too)
            match self.inbox.pop(0):
                case AddRequest(seq):
                    seq.status = Status.WAITING
                    self.scheduler.add(seq)
                    self.num_added += 1
                case Abort(req_id) if self.mover.forward_abort(req_id) or self.mover.abort_incoming(req_id):
                    pass
                case Adopt() as adopt:
                    self.mover.adopt(adopt)
                case Migrate(req_id, dst, last_stage_blocks, max_stages):
                    seq = next((s for s in self.scheduler.running if s.req_id == req_id), None)
                    if seq is None or not self.mover.migrate(seq, dst, last_stage_blocks, max_stages):
                        self.stats.num_migrations_refused += 1
                case Abort(req_id):
                    s = self.scheduler
                    s.remove_waiting(req_id)
                    for q in [q for q in s.running if q.req_id == req_id]:
                        s.remove_running(q)
                    self.rm.free_request(req_id)
                case MoveKVCache() as move:
                    if self.rm.move_kvcache(move.req_id, move.num_blocks, move.dst_inst):
                        self.stats.num_moves_accepted += 1
                    else:
                        self.stats.num_moves_refused += 1
                case Swap() as swap:
                    carry_out_swap(self, swap)

    def sync_now(self) -> None:
        """Mailbox call while held: take in the inbox, then send a heartbeat of everything changed."""
        self.take_inbox()
        self.link.sync(self.wait_ref)
        self.publish()

    # --- waiting while serving mail
    def wait_ref(self, ref):
        """A peer's or the gManager's reply; this loop answers its own mail meanwhile."""
        t0 = time.perf_counter()
        self.wait_refs([ref])
        self.stats.messaging_s += time.perf_counter() - t0
        return ray.get(ref)

    def wait_refs(self, refs) -> None:
        """Until every call of `refs` returned, serving mail: each reply wakes the mailbox (polling Ray for them
        every POLL_S cost 29 us of CPU a look, about a tenth of a core per waiting loop)."""
        futures = [ref.future() for ref in refs]
        for future in futures:
            future.add_done_callback(lambda _: self.mailbox.wake())
        self.mailbox.wait(lambda: all(f.done() for f in futures), poll_s=IDLE_WAIT_S)

    def recommend(self, debtor_inst: int, num_blocks: int) -> list[int]:
        """Control plane hook: the gManager's creditor candidates (gm_link.py)."""
        return self.link.recommend(debtor_inst, num_blocks)

    # --- the loop
    def run(self, plane) -> None:
        self.claim()
        self.plane, self.group = plane, plane.spec.address
        while not self.stopping:
            try:
                if self.reform is not None:  # (after a failure: before anything else)
                    self.rejoin()
                self.iterate()
            except Exception as err:  # noqa: BLE001 (a peer died, or a bug): the driver re-forms the group or stops
                if not self.stopping:
                    self.fail(err)
        self.snapshot = replace(self.snapshot, state=STOPPED)

    def iterate(self) -> None:
        self.mailbox.serve()
        if self.holds.wanted:
            hold_here(self)
        if self.reform is not None:
            self.rejoin()
        stats = self.stats
        t0, cpu0, messaging_s = time.perf_counter(), time.thread_time(), stats.messaging_s
        batch, works = self.control()
        t1 = time.perf_counter()
        stats.control_s += t1 - t0 - (stats.messaging_s - messaging_s)  # peers' replies apart
        if batch is None and not works:
            self.mailbox.serve(IDLE_WAIT_S)
            return
        stats.control_cpu_s += time.thread_time() - cpu0
        tokens = self.exchange.run(batch, works)
        if batch:
            self.last = (batch.seqs, tokens)
        step_s = time.perf_counter() - t0
        stats.num_steps += 1
        stats.step_s += step_s
        if batch and batch.segments:
            stats.num_split_steps += 1
            stats.split_step_s += step_s
        elif batch and any(i != self.inst_id for i in batch.plan.asks):
            stats.num_remote_steps += 1
            stats.remote_step_s += step_s

    def fail(self, err: Exception) -> None:
        """Publish the failure, then wait for the driver's new group (or a stop), answering mail meanwhile."""
        where = traceback.extract_tb(err.__traceback__)[-1]
        text = f"{type(err).__name__}: {str(err).splitlines()[0][:600] if str(err) else ''} " \
               f"({os.path.basename(where.filename)}:{where.lineno})"
        # a failure met on the way to a re-formation already asked for is not a new one
        state = BROKEN if self.reform is None else REFORMING
        self.snapshot = replace(self.snapshot, state=state, error=text, group=self.group)
        self.outbox.wake()
        self.mailbox.wait(lambda: self.holds.acknowledge() or self.reform is not None or self.stopping)

    def rejoin(self) -> None:
        reform, self.reform = self.reform, None
        rejoin(self, reform)

    def control(self):
        """The control phase; returns the batch to run (or None) and what each partner of the step is asked."""
        if self.last is not None:
            seqs, token_ids = self.last
            self.last = None
            counts = [self.mover.reported(s) for s in seqs]
            finished = self.instance.end_step(seqs, token_ids)
            self.report(seqs, counts, finished)
        self.take_inbox()
        self.exchange.begin()
        self.mover.after_step()
        seqs, is_prefill = self.instance.begin_step(self.exchange)
        exchange = self.exchange
        # (a step that also moves KV or hands requests over takes the home's path, which carries them)
        batch = (make_batch(self.rm, seqs, is_prefill, self.config.block_size, exchange.tables,
                            self.config.chunked_prefill_tokens is not None,
                            self.sequence_parallel and not (exchange.pairs or exchange.adoptions)) if seqs else None)
        works = exchange.partner_works(batch.plan if batch else None, batch.segments if batch else None)
        self.link.beat()
        self.publish()
        return batch, works

    # --- what others read
    def report(self, seqs, counts, finished) -> None:
        self.snapshot = replace(self.snapshot, stats=self.stats.copy())  # at least as fresh as the tokens
        self.outbox.put(Report({s.req_id: (n, s.output_ids[n:]) for s, n in zip(seqs, counts)},
                               [(s.req_id, s.placement, s.num_preemptions) for s in finished]))

    def publish(self) -> None:
        rm, s = self.rm, self.scheduler
        self.snapshot = Snapshot(state=HELD if self.holds.holders else RUNNING, group=self.group,
                                 status=self.instance.status(), num_used=rm.pool.num_used, reserved=dict(rm.reserved),
                                 num_moves=len(rm.moves), num_tables=len(rm.tables), num_running=len(s.running),
                                 num_waiting=len(s.waiting), num_added=self.num_added, entries=tuple(rm.entries()),
                                 stats=self.stats.copy())
