"""The instance actor: model replica, rBlock caches, and its own serving loop (ray_loop.py) in a thread.

Its API is messages, not attribute access: dispatch (`add_request`) and results (`take_results`) for the driver;
`move_kvcache` and `swap` from the gManager; `try_move_kvcache` and the rManager calls a peer's control phase
makes (reserve, take, release a block, read or set a table entry) for peers. Tensors never travel through
these calls: the data plane is torch.distributed (ray_dataplane.py).
"""
import os
import threading

import ray
import torch

from reference_impl.backends.local import LocalBackend
from reference_impl.backends.ray.dataplane import DataPlane, GroupSpec, free_address
from reference_impl.backends.ray.loop import InstanceLoop
from reference_impl.backends.ray.peers import RemoteRManager
from reference_impl.engine import EngineConfig
from reference_impl.model import LlamaModel
from reference_impl.protocol import MoveKVCache, Swap
from reference_impl.rblock import RBlock
from reference_impl.sequence import Sequence


@ray.remote(max_concurrency=8)
class InstanceActor:
    def __init__(self, inst_id: int, model: LlamaModel, config: EngineConfig, device: str = "cpu"):
        torch.set_num_threads(int(os.environ.get("REPRO_RAY_TORCH_THREADS", "1")))
        if device != "cpu":
            torch.cuda.set_device(0)
            model = LlamaModel(model.config, {k: w.to(device) for k, w in model.w.items()})
            model.inv_freq = model.inv_freq.to(device)
        self.inst_id = inst_id
        self.config = config
        self.model = model
        self.device = torch.device(device)
        caches = LocalBackend(model, config, self.device, inst_ids=[inst_id]).caches
        self.caches = {tier: kv for (_, tier), kv in caches.items()}
        self.loop: InstanceLoop | None = None
        self.thread: threading.Thread | None = None

    def free_address(self) -> str:
        return free_address()

    def module_file(self) -> str:
        import reference_impl
        return reference_impl.__file__

    def start(self, handles: dict, gmanager, spec: GroupSpec) -> None:
        """Join the data plane and start the loop; every member is started at once (the group forms)."""
        # this instance first: `RManager._home` asks its own tables before any peer's (one actor call each)
        peers = {self.inst_id: None, **{i: RemoteRManager(i, h) for i, h in sorted(handles.items()) if i != self.inst_id}}
        self.loop = InstanceLoop(self.inst_id, self.config, self.model, self.caches, self.device, peers,
                                 gmanager, dict(handles))
        plane = self.make_plane(spec)
        self.thread = threading.Thread(target=self.loop.run, args=(plane,), daemon=True)
        self.thread.start()

    def make_plane(self, spec: GroupSpec) -> DataPlane:
        return DataPlane(spec, self.inst_id, self.device)

    def reform(self, spec: GroupSpec, dead: list[int], homed_there: list[int]) -> None:
        """Join a new group without the dead instances (the loop waits for this after a failure)."""
        self.loop.snapshot = {**self.loop.snapshot, "state": "reforming"}
        self.loop.reforms.put((spec, dead, homed_there, self.make_plane))

    def stop(self) -> None:
        if self.loop is not None:
            self.loop.stopping = True
            self.loop.resumed.set()

    # --- driver: dispatch, results, observation
    def add_request(self, seq: Sequence) -> None:
        self.loop.inbox.put(("add", seq))

    def abort(self, req_id: int) -> None:
        """Drop a request (it failed): its blocks and reservations are freed at the next control phase."""
        self.loop.inbox.put(("abort", req_id))

    def take_results(self):
        """(new tokens {req_id: (first index, tokens)}, finished [(req_id, placement, preemptions)], snapshot)."""
        loop = self.loop
        with loop.results_lock:
            tokens, finished = loop.tokens, loop.finished
            loop.tokens, loop.finished = {}, []
        return tokens, finished, loop.snapshot

    def snapshot(self) -> dict:
        return self.loop.snapshot

    def pause(self) -> None:
        """Hold the lockstep loop before its next control phase (sent to the first rank: the others wait on its
        token); returns once no control phase runs anywhere."""
        self.loop.pause_requested = True
        self.loop.paused.wait()

    def resume(self) -> None:
        self.loop.pause_requested = False
        self.loop.paused.clear()
        self.loop.resumed.set()

    def sync_now(self) -> None:
        """While paused: take in the messages waiting in the inbox, then send a heartbeat of everything changed."""
        loop = self.loop
        loop.drain_inbox()
        if loop.hb_future is not None:  # the loop's last heartbeat lands first: the gManager keeps the newest
            ray.wait([loop.hb_future])
        ray.get(loop.gmanager.heartbeat.remote(loop.rm.heartbeat(loop.instance.status())))

    def entries(self):
        return self.loop.rm.entries()

    # --- gManager -> home
    def move_kvcache(self, msg: MoveKVCache) -> None:
        self.loop.inbox.put(("move", msg))

    def swap(self, msg: Swap) -> None:
        self.loop.inbox.put(("swap", msg))

    # --- peers' control phases (served while the token holder waits on them)
    def try_move_kvcache(self, req_id: int, num_blocks: int) -> bool:
        return self.loop.rm.try_move_kvcache(req_id, num_blocks)

    def take_reserved(self, req_id: int, num_blocks: int = 1) -> list[RBlock]:
        return self.loop.rm.take_reserved(req_id, num_blocks)

    def peer_move_kvcache(self, req_id: int, num_blocks: int, dst_inst: int, src_inst: int | None) -> bool:
        """A creditor reclaiming what it lent asks the home to move it (infinite-llm 5.2)."""
        return self.loop.rm.move_kvcache(req_id, num_blocks, dst_inst, src_inst)

    def num_moving(self, req_id: int, src_inst: int) -> int:
        return self.loop.rm.num_moving(req_id, src_inst)

    def alloc_for_swap(self, req_id: int) -> RBlock:
        return self.loop.rm.alloc_for_swap(req_id)

    def release(self, block: RBlock) -> None:
        self.loop.rm.release(block)

    def cancel_reservation(self, req_id: int, num_blocks: int | None) -> None:
        self.loop.rm.cancel_reservation(req_id, num_blocks)

    def num_reserved_for(self, req_id: int) -> int:
        return self.loop.rm.num_reserved_for(req_id)

    def num_lendable(self) -> int:
        return self.loop.rm.num_lendable

    def num_free(self) -> int:
        return self.loop.rm.num_free

    def has_table(self, req_id: int) -> bool:
        return req_id in self.loop.rm.tables

    def table(self, req_id: int) -> list[RBlock] | None:
        return list(self.loop.rm.tables[req_id]) if req_id in self.loop.rm.tables else None

    def set_table_entry(self, req_id: int, index: int, block: RBlock) -> None:
        self.loop.rm.set_block(req_id, index, block)

    def next_block_id(self) -> int:
        return next(self.loop.rm._ids)
