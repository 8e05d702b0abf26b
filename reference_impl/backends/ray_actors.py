"""The instance actor: model replica, rManager, scheduler and rBlock caches (the gManager's is ray_gmanager.py).

They wrap the engine's own classes; peers are `RemoteRManager` views, so `RManager`, `Scheduler` and `Instance`
run unchanged. The driver steps one instance at a time, as the local engine does, so the calls of one step
form a single chain across actors; threaded actors (max_concurrency > 1) serve the chain's re-entrant calls
(a creditor asking the home for a block id while the home waits on it).
"""
import os

import ray
import torch
from ray.exceptions import RayActorError

from reference_impl.backends.local import LocalBackend
from reference_impl.backends.ray_kv import ActorStepKV, attend_part
from reference_impl.backends.ray_remote import RemoteRManager
from reference_impl.engine import EngineConfig
from reference_impl.instance import Instance
from reference_impl.model import LlamaModel
from reference_impl.rblock import RBlock
from reference_impl.rmanager import RManager
from reference_impl.scheduler import Scheduler

RM_READS = ("num_free", "num_lendable")
RM_CALLS = ("entries", "move_kvcache", "try_move_kvcache", "take_reserved", "alloc_for_swap", "release",
            "cancel_reservation", "num_reserved_for")


class ActorBackend(LocalBackend):
    """The local backend of one actor: its own caches; remote rBlocks are read, written and attended by peers."""

    def __init__(self, actor: "InstanceActor", model, config: EngineConfig, device):
        super().__init__(model, config, device, inst_ids=[actor.inst_id])
        self.actor = actor
        self.num_copied_blocks = 0

    def step_kv(self, instance, tables, num_tokens, num_new, is_prefill):
        return ActorStepKV(self.actor.inst_id, self.actor.handles, self.caches, tables, num_tokens, num_new,
                           self.block_size, is_prefill, self.device)

    def copy_blocks(self, pairs) -> None:
        """Sources are read (locally or from peers through the object store) before any destination is written.
        A pair whose peer died loses its data: the request it belongs to is recomputed at once."""
        me = self.actor.inst_id
        self.num_copied_blocks += len(pairs)
        staged, lost = [], set()
        for inst in sorted({src.inst_id for src, _ in pairs}):
            group = [(src, dst) for src, dst in pairs if src.inst_id == inst]
            try:
                k, v = self.read([s for s, _ in group]) if inst == me else ray.get(
                    self.actor.handles[inst].read_blocks.remote([s for s, _ in group]))
            except RayActorError:
                lost |= {dst for _, dst in group}
                continue
            staged += [(dst, k[:, i], v[:, i]) for i, (_, dst) in enumerate(group)]
        for inst in sorted({dst.inst_id for dst, _, _ in staged}):
            group = [(dst, k, v) for dst, k, v in staged if dst.inst_id == inst]
            blocks, k, v = [d for d, _, _ in group], torch.stack([g[1] for g in group], 1), torch.stack(
                [g[2] for g in group], 1)
            try:
                if inst == me:
                    self.write(blocks, k, v)
                else:
                    ray.get(self.actor.handles[inst].write_blocks.remote(blocks, ray.put(k), ray.put(v)))
            except RayActorError:
                lost |= set(blocks)
        if lost:
            self.actor.recompute_holding(lost)

    def read(self, blocks: list[RBlock]):
        """k, v [L, len(blocks), block_size, Hkv, D] of rBlocks held here."""
        k = torch.stack([self.caches[(b.inst_id, b.device)][0][:, b.address] for b in blocks], 1)
        v = torch.stack([self.caches[(b.inst_id, b.device)][1][:, b.address] for b in blocks], 1)
        return k, v

    def write(self, blocks: list[RBlock], k, v) -> None:
        for i, b in enumerate(blocks):
            k_cache, v_cache = self.caches[(b.inst_id, b.device)]
            k_cache[:, b.address] = k[:, i].to(self.device)
            v_cache[:, b.address] = v[:, i].to(self.device)


@ray.remote(max_concurrency=4)
class InstanceActor:
    def __init__(self, inst_id: int, model: LlamaModel, config: EngineConfig, device: str = "cpu"):
        torch.set_num_threads(int(os.environ.get("REPRO_RAY_TORCH_THREADS", "1")))
        if device != "cpu":
            model = LlamaModel(model.config, {k: w.to(device) for k, w in model.w.items()})
            model.inv_freq = model.inv_freq.to(device)
        self.inst_id = inst_id
        self.config = config
        self.handles: dict = {}
        self.gmanager = None
        self.backend = ActorBackend(self, model, config, device)
        self.peers: dict = {}
        self.rm = None
        self.scheduler = None
        self.instance = None

    def connect(self, handles: dict, gmanager) -> None:
        """Peers by inst_id (self included) and the gManager; builds the rManager, scheduler and instance."""
        c = self.config
        self.handles = handles
        self.gmanager = gmanager
        self.peers = {i: RemoteRManager(i, h) for i, h in sorted(handles.items())}
        self.rm = RManager(self.inst_id, c.blocks_per_instance, c.cpu_blocks_per_instance, c.max_lent_blocks,
                           self.peers)
        recommend = self.recommend if c.pooling else None
        self.scheduler = Scheduler(self.rm, c.block_size, c.max_batch_size, recommend)
        self.instance = Instance(self.rm, self.scheduler, max(1, c.move_chunk_tokens // c.block_size))

    def recommend(self, debtor_inst: int, num_blocks: int) -> list[int]:
        try:
            candidates = ray.get(self.gmanager.call.remote("recommend_creditors", debtor_inst, num_blocks))[1]
        except RayActorError:  # the gManager is restarting: no hint this time, the scheduler preempts
            return []
        return [i for i in candidates if i in self.peers]

    # --- the rManager, for peers and the driver
    def rm_call(self, name: str, *args):
        rm = self.rm
        if name in RM_READS:
            return getattr(rm, name)
        if name in RM_CALLS:
            return getattr(rm, name)(*args)
        if name == "heartbeat":
            return rm.heartbeat(args[0], full=args[1])
        if name == "has_table":
            return args[0] in rm.tables
        if name == "table":
            return list(rm.tables[args[0]])
        if name == "set_table_entry":
            rm.tables[args[0]][args[1]] = args[2]
            return None
        if name == "next_block_id":
            return next(rm._ids)
        raise ValueError(f"unknown rManager call {name!r}")

    # --- the instance, for the driver
    def sched_call(self, name: str, *args):
        s = self.scheduler
        if name == "add":
            return s.add(args[0])
        if name in ("waiting", "running"):
            return list(getattr(s, name))
        if name == "has_work":
            return self.instance.has_work
        if name == "status":
            return self.instance.status()
        raise ValueError(f"unknown scheduler call {name!r}")

    def heartbeat(self, full: bool):
        return self.rm.heartbeat(self.instance.status(), full=full)

    def step(self):
        """One instance step -> (finished sequences, [(req_id, new tokens)], whether a peer failed)."""
        seqs = list(self.scheduler.running) + list(self.scheduler.waiting)
        before = [len(s.output_ids) for s in seqs]
        try:
            finished = self.instance.step(self.backend)
        except RayActorError:
            self.recompute_all()
            return [], [], True
        tokens = [(s.req_id, s.output_ids[n:]) for s, n in zip(seqs, before) if len(s.output_ids) > n]
        return finished, tokens, False

    def recompute_holding(self, blocks: set) -> None:
        """Preempt (recompute) the running requests whose table holds any of `blocks`."""
        for seq in list(self.scheduler.running):
            if any(b in blocks for b in self.rm.tables.get(seq.req_id, ())):
                self.scheduler.preempt(seq)

    def recompute_all(self) -> None:
        for seq in list(self.scheduler.running):
            self.scheduler.preempt(seq)
        for req_id in list(self.rm.tables):  # half-admitted when a peer died mid-admission
            self.rm.free_request(req_id)

    def drop_peer(self, dead: int, homed_there: list[int]) -> int:
        """Forget a dead instance: recompute requests with KV on it, free what requests homed there hold here."""
        rm = self.rm
        doomed = [s for s in self.scheduler.running if any(b.inst_id == dead for b in rm.tables[s.req_id])
                  or any(m.req_id == s.req_id and m.dst_inst == dead for m in rm.moves)]
        for seq in doomed:
            self.scheduler.preempt(seq)
        rm.moves = [m for m in rm.moves if m.dst_inst != dead]
        homed = set(homed_there)
        for (tier, address), req_id in list(rm.pool.owner.items()):
            if req_id in homed:
                rm.release(RBlock(-1, self.inst_id, tier, address))
        for req_id in homed:
            rm.cancel_reservation(req_id)
        del self.peers[dead]
        del self.handles[dead]
        return len(doomed)

    # --- rBlock data and DistAttention for peers
    def read_blocks(self, blocks: list[RBlock]):
        return self.backend.read(blocks)

    def write_blocks(self, blocks: list[RBlock], k, v) -> None:
        self.backend.write(blocks, k, v)

    def copy_blocks(self, pairs) -> None:
        self.backend.copy_blocks(pairs)

    def attend_part(self, layer: int, q, job: dict):
        caches = {tier: kv for (_, tier), kv in self.backend.caches.items()}
        with torch.inference_mode():
            return attend_part(caches, layer, q.to(self.backend.device), job)

    def usage(self) -> dict:
        """Pool accounting, for leak checks: used blocks, reservations, pending moves."""
        return {"num_used": self.rm.pool.num_used, "reserved": dict(self.rm.reserved), "num_moves": len(self.rm.moves),
                "num_tables": len(self.rm.tables)}

    def num_copied_blocks(self) -> int:
        return self.backend.num_copied_blocks

    def step_times_s(self) -> list[float]:
        return list(self.backend.step_times_s)
