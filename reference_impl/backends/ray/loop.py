"""An instance actor's own serving loop, in a thread of the actor, in lockstep with the other instances.

Each iteration: take the control token from the previous rank; the control phase (the previous step's
postprocess, the inbox of arrivals, `move_kvcache` and swaps, one chunk of KV moves, the schedule, the step
plan, a heartbeat to the gManager); pass the token on; all-gather the plans; run the model with DistAttention
over the data plane while the other instances run theirs.

Thread safety: the token is the lock of the control plane. An rManager is only touched by the token holder's
control phase, either directly or through an actor call (`RemoteRManager`) that its actor's threads serve
while the holder waits; the compute phase reads nothing of the control plane, only the plan it was given.
"""
import os
import queue
import threading
import time
import traceback
from dataclasses import dataclass

import ray
import torch
from ray.exceptions import RayActorError, RayError

from reference_impl.backends.ray.step import DistStep, HomePlan, plan_step
from reference_impl.dgfm import execute_swap
from reference_impl.instance import Instance
from reference_impl.rblock import RBlock
from reference_impl.rmanager import RManager
from reference_impl.scheduler import Scheduler
from reference_impl.sequence import Sequence, Status

IDLE_SLEEP_S = 0.003  # between iterations when no instance has anything to run


@dataclass(slots=True)
class Batch:
    """What the control phase scheduled, for the compute phase (which reads nothing else of the control plane)."""

    seqs: list[Sequence]
    token_ids: list[int]  # fed this step, flattened
    positions: list[int]
    num_new: list[int]  # tokens each sequence feeds
    plan: HomePlan


class InstanceLoop:
    def __init__(self, inst_id: int, config, model, caches: dict, device, peers: dict, gmanager, handles: dict):
        """caches: tier -> (k, v) of this instance; peers: inst_id -> RemoteRManager of every other instance."""
        c = config
        self.inst_id, self.config, self.model, self.caches, self.device = inst_id, config, model, caches, device
        self.gmanager, self.handles = gmanager, handles
        self.rm = RManager(inst_id, c.blocks_per_instance, c.cpu_blocks_per_instance, c.max_lent_blocks, peers,
                          exclusive_roles=c.exclusive_roles)
        self.scheduler = Scheduler(self.rm, c.block_size, c.max_batch_size, self.recommend if c.pooling else None)
        self.instance = Instance(self.rm, self.scheduler, max(1, c.move_chunk_tokens // c.block_size))
        self.plane = None
        self.inbox: queue.SimpleQueue = queue.SimpleQueue()
        self.reforms: queue.SimpleQueue = queue.SimpleQueue()
        self.results_lock = threading.Lock()
        self.tokens: dict[int, tuple[int, list[int]]] = {}  # req_id -> (first index, new tokens) not yet taken
        self.finished: list[tuple] = []  # (req_id, placement, num_preemptions)
        self.last = None  # (seqs, token ids) of the step whose postprocess is due
        self.pairs: list = []
        self.snapshot = {"state": "starting"}
        self.stats = {"num_steps": 0, "num_moves_accepted": 0, "num_moves_refused": 0, "num_full_heartbeats": 0,
                      "num_gmanager_restarts": 0, "num_swaps": 0, "num_copied_blocks": 0, "step_s": 0.0,
                      "messaging_s": 0.0, "control_s": 0.0}
        self.hb_future, self.gm_boot, self.full_heartbeat = None, None, True
        self.pause_requested, self.paused, self.resumed = False, threading.Event(), threading.Event()
        self.stopping = False
        self.num_added = 0  # requests dispatched here so far (the driver's dispatch counts what is not in yet)

    # --- control plane hooks
    def recommend(self, debtor_inst: int, num_blocks: int) -> list[int]:
        try:
            candidates = ray.get(self.gmanager.recommend_creditors.remote(debtor_inst, num_blocks))
        except RayError:  # the gManager is restarting: no hint this time, the scheduler preempts
            return []
        return [i for i in candidates if i in self.rm.peers]

    def copy_blocks(self, pairs) -> None:
        """Backend hook of `advance_moves` and DGFM: the data moves in this step's lockstep exchange."""
        self.pairs += [(s.inst_id, s.device, s.address, d.inst_id, d.device, d.address) for s, d in pairs]
        self.stats["num_copied_blocks"] += len(pairs)

    # --- the loop
    def run(self, plane) -> None:
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
                self.snapshot = {**self.snapshot, "state": "broken", "error": text}
                self.plane.close()
                spec, dead, homed_there, make_plane = self.reforms.get()
                self.plane = make_plane(spec)
                self.recover(dead, homed_there)

    def iterate(self) -> None:
        if self.pause_requested and self.plane.rank == 0:
            self.paused.set()
            self.resumed.wait()
            self.resumed.clear()
        t0 = time.perf_counter()
        self.plane.take_token()
        t1 = time.perf_counter()
        plan, batch = self.control()
        t2 = time.perf_counter()
        self.plane.pass_token()
        plans = self.plane.all_plans(plan)
        t3 = time.perf_counter()
        self.stats["control_s"] += t2 - t1
        if not any(p["busy"] for p in plans.values()):
            time.sleep(IDLE_SLEEP_S)
            return
        step = DistStep(self.inst_id, self.plane, self.caches, batch and batch.plan, plans, self.model.config,
                        self.config.block_size, self.model.dtype, self.device)
        with torch.inference_mode():
            if batch:
                self.last = (batch.seqs, self.forward(batch, step))
            else:
                for layer in range(self.model.config.num_layers):
                    step.attend(layer)
        self.stats["num_steps"] += 1
        self.stats["step_s"] += time.perf_counter() - t0
        self.stats["messaging_s"] += (t1 - t0) + (t3 - t2) + step.messaging_s

    def forward(self, batch: Batch, step: DistStep) -> list[int]:
        hidden = self.model.forward(torch.tensor(batch.token_ids, device=self.device),
                                    torch.tensor(batch.positions, device=self.device), step.attend)
        last = torch.tensor(batch.num_new, device=self.device).cumsum(0) - 1
        return self.model.logits(hidden[last]).argmax(-1).tolist()

    def control(self):
        """The control phase; returns (this step's plan for the others, the batch to run or None)."""
        if self.last is not None:
            seqs, token_ids = self.last
            self.last = None
            counts = [len(s.output_ids) for s in seqs]
            finished = self.instance.end_step(seqs, token_ids)
            self.report(seqs, counts, finished)
        self.pairs = []  # before the inbox: a DGFM swap executed there records its block pairs
        self.drain_inbox()
        seqs, is_prefill = self.instance.begin_step(self)
        batch, asks = None, {}
        if seqs:
            tables = [list(self.rm.tables[s.req_id]) for s in seqs]
            num_tokens = [s.num_tokens for s in seqs]
            num_new = num_tokens if is_prefill else [1] * len(seqs)
            ids = [t for s in seqs for t in (s.token_ids if is_prefill else s.token_ids[-1:])]
            positions = [p for n, new in zip(num_tokens, num_new) for p in range(n - new, n)]
            plan = plan_step(tables, num_tokens, num_new, self.config.block_size, is_prefill)
            batch, asks = Batch(seqs, ids, positions, num_new, plan), plan.asks
        self.heartbeat()
        self.publish()
        return {"busy": bool(seqs or self.pairs), "asks": asks, "pairs": self.pairs}, batch

    def report(self, seqs, counts, finished) -> None:
        with self.results_lock:
            for seq, n in zip(seqs, counts):
                first, new = self.tokens.get(seq.req_id, (n, []))
                self.tokens[seq.req_id] = (first, new + seq.output_ids[n:])
            self.finished += [(s.req_id, s.placement, s.num_preemptions) for s in finished]

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
            elif kind == "swap" and self.plane.rank != 0:  # swaps run first in a step: before any plan is made
                self.handles[self.plane.spec.members[0]].swap.remote(msg)
            elif kind == "swap":
                execute_swap(msg, self.rm.peers, self.copy_blocks)
                self.gmanager.swap_done.remote(msg)
                self.stats["num_swaps"] += 1

    def heartbeat(self) -> None:
        """Send this step's heartbeat; a gManager that restarted (new boot id, or the call failed) gets the full
        placement list next (the papers' failover rule)."""
        if self.hb_future is not None and ray.wait([self.hb_future], timeout=0)[0]:
            try:
                boot = ray.get(self.hb_future)
            except RayError:  # lost with the old incarnation: the new one gets everything
                boot, self.full_heartbeat = self.gm_boot, True
            if boot != self.gm_boot and self.gm_boot is not None:
                self.full_heartbeat = True
                self.stats["num_gmanager_restarts"] += 1
            self.gm_boot = boot
            self.hb_future = None
        if self.hb_future is None:
            full = self.full_heartbeat
            self.full_heartbeat = False
            self.stats["num_full_heartbeats"] += full
            self.hb_future = self.gmanager.heartbeat.remote(self.rm.heartbeat(self.instance.status(), full=full))

    def publish(self) -> None:
        rm, s = self.rm, self.scheduler
        self.snapshot = {"state": "running", "status": self.instance.status(), "num_used": rm.pool.num_used,
                         "reserved": dict(rm.reserved), "num_moves": len(rm.moves), "num_tables": len(rm.tables),
                         "num_running": len(s.running), "num_waiting": len(s.waiting), "num_added": self.num_added,
                         "entries": rm.entries(), "stats": dict(self.stats)}

    # --- failures
    def recover(self, dead: list[int], homed_there: list[int]) -> None:
        """After a peer died: recompute every running request here (the aborted step may have half-written KV
        or moved blocks), forget the dead peers and free what the requests homed there hold here."""
        self.plane.take_token()
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
        self.plane.pass_token()

