"""An instance actor's own serving loop, in a thread of the actor; it waits for no instance it shares nothing with.

Each iteration: the control phase (the previous step's postprocess, the inbox of arrivals, `move_kvcache` and
swaps, one chunk of KV moves, the schedule, the step plan, a heartbeat to the gManager), then the step: each
partner of this step (a creditor holding rBlocks of a scheduled request, an instance a KV block moves from or
to) gets its part of the plan in a message and serves it in a thread of its own actor (serve.py), while this
loop runs its model with DistAttention over the data plane. A debtor's step so waits only for its creditors'
MicroAttention and the link; a creditor never waits for its debtors.

State: the rManager, scheduler and instance are this loop thread's alone. Peers, the gManager and the driver
reach them through the mailbox (mailbox.py), which the loop serves at its control phase, before and after every
layer's attention, before the logits and whenever it waits on a peer; the compute phase reads nothing of the
control plane, only the plan it was given. A wait on the data plane blocks (gloo completes a transfer only inside
`wait`): it waits only for partners' serving threads, which never wait for any loop, so it cannot deadlock.
"""
import os
import queue
import threading
import time
import traceback
from dataclasses import dataclass

import ray
import torch
from ray.exceptions import RayError

from reference_impl.backends.ray.mailbox import Mailbox
from reference_impl.backends.ray.peers import RemoteRManager
from reference_impl.backends.ray.serve import PartnerWork
from reference_impl.backends.ray.step import DistStep, HomePlan, plan_step
from reference_impl.dgfm import execute_swap
from reference_impl.instance import Instance
from reference_impl.rblock import RBlock
from reference_impl.sequence import Sequence, Status

# an iteration with nothing to run waits this long on its mailbox (what gives it work, an arrival in its inbox or a
# peer's message, wakes it at once; an idle loop still heartbeats at about this period)
IDLE_WAIT_S = 0.02


@dataclass(slots=True)
class Batch:
    """What the control phase scheduled, for the compute phase (which reads nothing else of the control plane)."""

    seqs: list[Sequence]
    token_ids: list[int]  # fed this step, flattened
    positions: list[int]
    num_new: list[int]  # tokens each sequence feeds
    plan: HomePlan


STAT_KEYS = ("num_steps", "num_moves_accepted", "num_moves_refused", "num_full_heartbeats", "num_gmanager_restarts",
             "num_swaps", "num_copied_blocks", "num_partner_calls", "num_served", "num_peer_calls")
# serve_compute_s: a creditor's time serving its debtors' steps (MicroAttention, KV stores), waits excluded, on the
# wall clock (serve_cpu_s: the serving thread's CPU time); reply_wait_s: a home's wait for its partners' calls of
# an earlier step to return (part of messaging_s); peer_call_s: the control phase's calls on peers' rManagers that
# wait for a reply (num_peer_calls of them; part of messaging_s); compute_cpu_s: the loop thread's CPU time in the
# compute phase (beside compute_s on the wall clock: their ratio is how much of a core the model got), and
# control_cpu_s in the control phases of steps (peers' replies included: waiting for one costs little CPU)
TIME_KEYS = ("step_s", "control_s", "compute_s", "wait_s", "messaging_s", "serve_compute_s", "serve_cpu_s",
             "reply_wait_s", "peer_call_s", "compute_cpu_s", "control_cpu_s")


class InstanceLoop:
    def __init__(self, inst_id: int, config, model, caches: dict, device, gmanager, handles: dict,
                 heartbeat_interval_s: float = 0.0):
        """caches: tier -> (k, v) of this instance; handles: inst_id -> actor handle of every instance;
        heartbeat_interval_s: the least time between two heartbeats (the gManager's rounds need no more)."""
        self.inst_id, self.config, self.model, self.caches, self.device = inst_id, config, model, caches, device
        self.gmanager, self.handles = gmanager, dict(handles)
        self.mailbox = Mailbox()
        self.stats = {**dict.fromkeys(STAT_KEYS, 0), **dict.fromkeys(TIME_KEYS, 0.0)}
        self.instance = Instance.build(inst_id, config, self.recommend)
        self.rm, self.scheduler = self.instance.rm, self.instance.scheduler
        for i, handle in sorted(handles.items()):
            if i != inst_id:
                self.rm.peers[i] = RemoteRManager(i, handle, self.rm, self.wait_ref, self.stats)
        if hasattr(model, "wait"):  # a device-time model: its device time passes while this loop serves mail
            model.wait = self.mailbox.sleep
        self.plane = None
        self.inbox: queue.SimpleQueue = queue.SimpleQueue()  # driver and gManager messages, at the control phase
        self.reforms: queue.SimpleQueue = queue.SimpleQueue()
        self.results_lock = threading.Lock()
        self.results_ready = threading.Condition(self.results_lock)  # the driver's results call waits on it
        self.tokens: dict[int, tuple[int, list[int]]] = {}  # req_id -> (first index, new tokens) not yet taken
        self.finished: list[tuple] = []  # (req_id, placement, num_preemptions)
        self.last = None  # (seqs, token ids) of the step whose postprocess is due
        self.pairs: list = []  # KV block pairs of this step: (src inst, tier, address, dst inst, tier, address)
        self.serving: list = []  # the partners' calls of the previous steps not yet seen returned
        self.num_works: dict[tuple[int, str], int] = {}  # (partner, group) -> works sent to it so far
        self.holds: list[threading.Event] = []  # hold requests to acknowledge at the next iteration boundary
        self.held_by: set = set()
        self.snapshot = {"state": "starting"}
        self.hb_future, self.gm_boot, self.full_heartbeat = None, None, True
        self.heartbeat_interval_s, self.next_heartbeat_s = heartbeat_interval_s, 0.0
        self.hint: list[int] = []  # the gManager's creditor candidates for this instance, from its last reply
        self.stopping = False
        self.num_added = 0  # requests dispatched here so far (the driver's dispatch counts what is not in yet)

    # --- waiting while serving mail
    def wait_ref(self, ref):
        """A peer's or the gManager's reply; this loop answers its own mail meanwhile."""
        t0 = time.perf_counter()
        self.wait_refs([ref])
        self.stats["messaging_s"] += time.perf_counter() - t0
        return ray.get(ref)

    def wait_refs(self, refs) -> None:
        """Until every call of `refs` returned, serving mail: each reply wakes the mailbox (polling Ray for them
        every POLL_S cost 29 us of CPU a look, about a tenth of a core per waiting loop)."""
        futures = [ref.future() for ref in refs]
        for future in futures:
            future.add_done_callback(lambda _: self.mailbox.wake())
        self.mailbox.wait(lambda: all(f.done() for f in futures), poll_s=IDLE_WAIT_S)

    # --- control plane hooks
    def recommend(self, debtor_inst: int, num_blocks: int) -> list[int]:
        """The gManager's creditor candidates from its last heartbeat reply, those still with room in its view
        (a stale hint is refused by the creditor and tried again after the next reply)."""
        peers = self.rm.peers
        return [i for i in self.hint if i in peers and i != self.inst_id and peers[i].num_lendable > 0]

    def copy_blocks(self, pairs) -> None:
        """Backend hook of `advance_moves` and DGFM: the data moves in this step's exchange with the partners."""
        for s, d in pairs:
            self.pairs.append((s.inst_id, s.device, s.address, d.inst_id, d.device, d.address))
            if s.inst_id != self.inst_id:  # read there in this step: released there once read
                self.rm.peers[s.inst_id].moving_sources.add((s.device, s.address))
        self.stats["num_copied_blocks"] += len(pairs)

    # --- the loop
    def run(self, plane) -> None:
        self.mailbox.owner = threading.get_ident()
        self.plane = plane
        while not self.stopping:
            try:
                self.iterate()
            except Exception as err:  # noqa: BLE001 (a peer died, or a bug): the driver re-forms the group or stops
                if self.stopping:
                    return
                where = traceback.extract_tb(err.__traceback__)[-1]
                text = f"{type(err).__name__}: {str(err).splitlines()[0][:600] if str(err) else ''} " \
                       f"({os.path.basename(where.filename)}:{where.lineno})"
                # a failure met on the way to a re-formation already asked for is not a new one
                state = "broken" if self.reforms.empty() else "reforming"
                self.snapshot = {**self.snapshot, "state": state, "error": text}
                with self.results_ready:
                    self.results_ready.notify_all()
                self.mailbox.wait(lambda: self.acknowledge_holds() or not self.reforms.empty() or self.stopping)
                if not self.stopping:
                    self.rejoin()

    def iterate(self) -> None:
        self.mailbox.serve()
        if self.holds or self.held_by:
            self.hold()
        if not self.reforms.empty():
            self.rejoin()
        t0, cpu0, messaging_s = time.perf_counter(), time.thread_time(), self.stats["messaging_s"]
        batch, works = self.control()
        t1 = time.perf_counter()
        self.stats["control_s"] += t1 - t0 - (self.stats["messaging_s"] - messaging_s)  # peers' replies apart
        if batch is None and not works:
            self.mailbox.serve(IDLE_WAIT_S)
            return
        self.stats["control_cpu_s"] += time.thread_time() - cpu0
        self.exchange(batch, works)
        self.stats["num_steps"] += 1
        self.stats["step_s"] += time.perf_counter() - t0

    def exchange(self, batch: Batch | None, works: dict[int, PartnerWork]) -> None:
        """This step's data plane: the partners' calls, then the model (or only the moves) here."""
        t0 = time.perf_counter()
        self.wait_served(all_steps=False)
        if works:
            self.serving.append([self.handles[i].serve.remote(work) for i, work in works.items()])
        self.stats["num_partner_calls"] += len(works)
        mine = [p for p in self.pairs if self.inst_id in (p[0], p[3])]
        step = DistStep(self.inst_id, self.plane, self.caches, batch and batch.plan, {}, mine, self.inst_id,
                        self.model.config, self.config.block_size, self.model.dtype, self.device)
        t1, cpu1 = time.perf_counter(), time.thread_time()
        with torch.inference_mode():
            if batch:
                self.last = (batch.seqs, self.forward(batch, step))
            else:
                for layer in range(self.model.config.num_layers):
                    step.attend(layer)
        self.stats["messaging_s"] += t1 - t0
        self.stats["wait_s"] += step.messaging_s
        self.stats["compute_s"] += time.perf_counter() - t1 - step.messaging_s
        self.stats["compute_cpu_s"] += time.thread_time() - cpu1

    def wait_served(self, all_steps: bool = True) -> None:
        """The partner calls of earlier steps are done (a failure raises here). all_steps=False leaves the last
        step's calls pending: its data plane is complete once this home has every answer, only their returns are
        left, and a partner serves this home's next work after it (serve.InTurn)."""
        t0 = time.perf_counter()
        keep = [] if all_steps or not self.serving else self.serving[-1:]
        refs = [r for step in self.serving[:len(self.serving) - len(keep)] for r in step]
        if refs:
            self.wait_refs(refs)
            ray.get(refs)
        if keep:  # those seen returned already: their failures surface now
            done = ray.wait(keep[0], num_returns=len(keep[0]), timeout=0)[0]
            ray.get(done)
            keep = [[r for r in keep[0] if r not in done]]
        self.serving = [step for step in keep if step]
        self.stats["reply_wait_s"] += time.perf_counter() - t0

    def forward(self, batch: Batch, step: DistStep) -> list[int]:
        def attend(layer, q, k, v):
            self.mailbox.serve()
            out = step.attend(layer, q, k, v)
            self.mailbox.serve()  # again before the MLP: a peer waiting on a reply from here waits less
            return out

        hidden = self.model.forward(torch.tensor(batch.token_ids, device=self.device),
                                    torch.tensor(batch.positions, device=self.device), attend)
        self.mailbox.serve()
        last = torch.tensor(batch.num_new, device=self.device).cumsum(0) - 1
        return self.model.logits(hidden[last]).argmax(-1).tolist()

    def control(self) -> tuple[Batch | None, dict[int, PartnerWork]]:
        """The control phase; returns the batch to run (or None) and what each partner of the step is asked."""
        if self.last is not None:
            seqs, token_ids = self.last
            self.last = None
            counts = [len(s.output_ids) for s in seqs]
            finished = self.instance.end_step(seqs, token_ids)
            self.report(seqs, counts, finished)
        self.drain_inbox()
        self.pairs = []
        for peer in self.remotes():
            peer.moving_sources.clear()
        seqs, is_prefill = self.instance.begin_step(self)
        batch = None
        if seqs:
            tables = [list(self.rm.tables[s.req_id]) for s in seqs]
            num_tokens = [s.num_tokens for s in seqs]
            num_new = num_tokens if is_prefill else [1] * len(seqs)
            ids = [t for s in seqs for t in (s.token_ids if is_prefill else s.token_ids[-1:])]
            positions = [p for n, new in zip(num_tokens, num_new) for p in range(n - new, n)]
            plan = plan_step(tables, num_tokens, num_new, self.config.block_size, is_prefill)
            batch = Batch(seqs, ids, positions, num_new, plan)
        works = self.partner_works(batch.plan if batch else None)
        self.heartbeat()
        self.publish()
        return batch, works

    def remotes(self) -> list[RemoteRManager]:
        return [p for i, p in self.rm.peers.items() if i != self.inst_id]

    def partner_works(self, plan: HomePlan | None) -> dict[int, PartnerWork]:
        works = {}
        asks = plan.asks if plan else {}
        partners = set(asks) | {p[0] for p in self.pairs} | {p[3] for p in self.pairs}
        partners |= {p.inst_id for p in self.remotes() if p.deferred_releases}
        for i in sorted(partners - {self.inst_id}):
            peer = self.rm.peers.get(i)
            if peer is None:
                continue
            pairs = [p for p in self.pairs if i in (p[0], p[3])]
            key = (i, self.plane.spec.address)
            number = self.num_works[key] = self.num_works.get(key, -1) + 1
            works[i] = PartnerWork(self.inst_id, key[1], asks.get(i), pairs, peer.deferred_releases, number)
            peer.deferred_releases = []
        return works

    def report(self, seqs, counts, finished) -> None:
        with self.results_lock:
            for seq, n in zip(seqs, counts):
                first, new = self.tokens.get(seq.req_id, (n, []))
                self.tokens[seq.req_id] = (first, new + seq.output_ids[n:])
            self.finished += [(s.req_id, s.placement, s.num_preemptions) for s in finished]
            self.results_ready.notify_all()

    def drain_inbox(self) -> None:
        while True:
            try:
                kind, msg = self.inbox.get_nowait()
            except queue.Empty:
                return
            if kind == "add":
                msg.status = Status.WAITING
                self.scheduler.add(msg)
                self.num_added += 1
            elif kind == "abort":
                s = self.scheduler
                s.remove_waiting(msg)
                for q in [q for q in s.running if q.req_id == msg]:
                    s.remove_running(q)
                self.rm.free_request(msg)
            elif kind == "move":
                accepted = self.rm.move_kvcache(msg.req_id, msg.num_blocks, msg.dst_inst)
                self.stats["num_moves_accepted" if accepted else "num_moves_refused"] += 1
            elif kind == "swap":
                self.swap(msg)

    def swap(self, swap) -> None:
        """A DGFM swap, carried out while every other instance it touches holds at its iteration boundary (a
        swap frees and refills full instances at once: nobody may step on the blocks before the data lands)."""
        involved = sorted({i for _, creditor, home, _ in swap.recalls for i in (creditor, home)} - {self.inst_id})
        involved = [i for i in involved if i in self.handles]
        self.wait_ref_all([self.handles[i].hold.remote(self.inst_id) for i in involved])
        try:
            self.pairs = []
            execute_swap(swap, self.rm.peers, self.copy_blocks)
            works = self.partner_works(None)
            if works or self.pairs:
                self.exchange(None, works)
                self.wait_served()
            self.pairs = []
        finally:
            for i in involved:
                self.handles[i].unhold.remote(self.inst_id)
        self.gmanager.swap_done.remote(swap)
        self.stats["num_swaps"] += 1

    def wait_ref_all(self, refs) -> None:
        for ref in refs:
            self.wait_ref(ref)

    # --- holds (the driver's pause, a DGFM swap elsewhere)
    def request_hold(self, holder, event: threading.Event) -> None:
        """Mailbox message: hold at the next iteration boundary (`event` is set once there)."""
        self.held_by.add(holder)
        self.holds.append(event)
        if self.mailbox.owner is None:  # the loop has not started: nothing runs
            self.acknowledge_holds()

    def acknowledge_holds(self) -> None:
        for event in self.holds:
            event.set()
        self.holds = []

    def hold(self) -> None:
        """At the boundary: no control phase runs here until every holder let go; mail is still answered."""
        self.wait_served()  # what the partners do for this home is done before the holder looks
        self.acknowledge_holds()
        self.snapshot = {**self.snapshot, "state": "held"}
        # only mail lets it go on (a release, a stop's wake): a held loop that polled every POLL_S took 4% of a
        # core, stolen from the engine serving beside it
        self.mailbox.wait(self.may_go_on, poll_s=IDLE_WAIT_S)
        self.snapshot = {**self.snapshot, "state": "running"}

    def may_go_on(self) -> bool:
        self.acknowledge_holds()  # a second holder while held: it holds already
        return not self.held_by or self.stopping

    def sync_now(self) -> None:
        """Mailbox message while held: take in the inbox, then send a heartbeat of everything changed."""
        self.drain_inbox()
        if self.hb_future is not None:  # the loop's last heartbeat lands first: the gManager keeps the newest
            self.wait_ref(self.hb_future)
            self.hb_future = None
        self.on_reply(self.wait_ref(self.gmanager.heartbeat.remote(self.rm.heartbeat(self.instance.status()))))
        self.publish()

    # --- heartbeats and what they bring back
    def heartbeat(self) -> None:
        """Send this step's heartbeat; a gManager that restarted (new boot id, or the call failed) gets the full
        placement list next (the papers' failover rule). The reply carries the gManager's view of the peers."""
        if self.hb_future is not None and ray.wait([self.hb_future], timeout=0)[0]:
            try:
                self.on_reply(ray.get(self.hb_future))
            except RayError:  # lost with the old incarnation: the new one gets everything
                self.full_heartbeat = True
            self.hb_future = None
        if self.hb_future is None and (self.full_heartbeat or time.perf_counter() >= self.next_heartbeat_s):
            self.next_heartbeat_s = time.perf_counter() + self.heartbeat_interval_s
            full = self.full_heartbeat
            self.full_heartbeat = False
            self.stats["num_full_heartbeats"] += full
            self.hb_future = self.gmanager.heartbeat.remote(self.rm.heartbeat(self.instance.status(), full=full))

    def on_reply(self, reply) -> None:
        boot, lendable, self.hint = reply
        if boot != self.gm_boot and self.gm_boot is not None:
            self.full_heartbeat = True
            self.stats["num_gmanager_restarts"] += 1
        self.gm_boot = boot
        for peer in self.remotes():
            peer.view_lendable = lendable.get(peer.inst_id, 0)

    def publish(self) -> None:
        rm, s = self.rm, self.scheduler
        self.snapshot = {"state": "held" if self.held_by else "running", "status": self.instance.status(),
                         "num_used": rm.pool.num_used, "reserved": dict(rm.reserved), "num_moves": len(rm.moves),
                         "num_tables": len(rm.tables),
                         "num_running": len(s.running), "num_waiting": len(s.waiting), "num_added": self.num_added,
                         "entries": rm.entries(), "stats": self.stats_now()}

    def stats_now(self) -> dict:
        with self.results_lock:
            return dict(self.stats)

    # --- failures
    def rejoin(self) -> None:
        """Leave the broken group, join the survivors' new one (serving mail while it forms), then recompute every
        running request here (the aborted step may have half-written KV or moved blocks), forget the dead peers
        and free what the requests homed there hold here."""
        spec, dead, homed_there, make_plane = self.reforms.get()
        self.plane.close()
        self.serving = []
        joined = {}
        thread = threading.Thread(target=lambda: joined.setdefault("plane", make_plane(spec)), daemon=True)
        thread.start()
        self.mailbox.wait(lambda: not thread.is_alive())
        self.plane = joined["plane"]
        self.last = None
        for seq in list(self.scheduler.running):
            self.scheduler.preempt(seq)
        for req_id in list(self.rm.tables):  # half-admitted when the failure hit mid-admission
            self.rm.free_request(req_id)
        homed = set(homed_there)
        for (tier, address), req_id in list(self.rm.pool.owner.items()):
            if req_id in homed:
                self.rm.release(RBlock(-1, self.inst_id, tier, address))
        for req_id in homed:
            self.rm.cancel_reservation(req_id)
        for d in dead:
            self.rm.peers.pop(d, None)
            self.handles.pop(d, None)
        self.full_heartbeat = True
        self.publish()
