"""The instance actor: model replica, rBlock caches, its own serving loop (loop.py) in a thread, and the
partners' steps it serves (serve.py) in Ray's threads.

Its API is messages, not attribute access: dispatch (`add_request`) and results (`take_results`) for the driver;
`move_kvcache` and `swap` from the gManager; for peers, `rm_call` / `rm_post` (their requests on this rManager as
typed messages, peer_messages.py, in the order each peer sent them), `serve` (a home's step) and `hold` / `unhold`
(a DGFM swap). Each posts a message into the loop's mailbox (messages.py) or asks the loop through it; the loop thread alone changes its
state, and these calls read only what it published (its snapshot, its outbox). Tensors never travel through
these calls: the data plane is torch.distributed (dataplane.py).
"""
import os
import sys
import threading
import time
from concurrent.futures import Future

import ray
import torch

import reference_impl
from reference_impl.backends.local import LocalBackend
from reference_impl.backends.ray.dataplane import DataPlane, GroupSpec, free_address
from reference_impl.backends.ray.loop import InstanceLoop
from reference_impl.backends.ray.messages import Abort, AddRequest, Hold, Migrate, Reform, Served, Stop, Unhold
from reference_impl.backends.ray.peer_messages import PeerMessage
from reference_impl.backends.ray.serve import InTurn, PartnerWork, serve
from reference_impl.backends.ray.snapshot import BROKEN, Snapshot
from reference_impl.control.engine import EngineConfig
from reference_impl.control.placement import Placement
from reference_impl.control.protocol import MoveKVCache, Swap
from reference_impl.control.rblock import RBlock
from reference_impl.control.sequence import Sequence

MAX_CONCURRENCY = 64  # Ray threads: the driver's calls, a waiting call per peer, a step served per debtor
GIL_SWITCH_S = 0.0005


class PeerRequests:
    """What a peer (always the home of `req_id`) may ask of this rManager; runs on the loop thread."""

    def __init__(self, loop: InstanceLoop):
        self.loop, self.rm = loop, loop.rm

    def try_move_kvcache(self, req_id: int, num_blocks: int, home: int) -> bool:
        self.rm.note_home(req_id, home)
        return self.rm.try_move_kvcache(req_id, num_blocks)

    def take_reserved(self, req_id: int, num_blocks: int, home: int, ids: list[int]) -> list[RBlock]:
        """Up to `num_blocks` blocks of the reservation (fewer when room was taken back), ids from the home."""
        num_blocks = min(num_blocks, self.rm.num_reserved_for(req_id))
        if num_blocks <= 0:
            return []
        self._for_home(req_id, home, ids)
        return self.rm.take_reserved(req_id, num_blocks)

    def borrow(self, req_id: int, num_blocks: int, home: int, ids: list[int]) -> list[RBlock]:
        """`num_blocks` blocks reserved and taken at once (none when short of room), ids from the home."""
        self._for_home(req_id, home, ids)
        return self.rm.borrow(req_id, num_blocks)

    def _for_home(self, req_id: int, home: int, ids: list[int]) -> None:
        """Blocks allocated here next for `req_id` belong to `home` and take the ids it drew."""
        self.rm.note_home(req_id, home)
        self.rm.peers[home]._ids = iter(ids)

    def cancel_reservation(self, req_id: int, num_blocks: int | None) -> None:
        self.rm.cancel_reservation(req_id, num_blocks)

    def status(self):
        return self.loop.instance.status()

    def room_for_move(self) -> tuple[int, int, int]:
        return self.loop.mover.room()

    def take_for_move(self, req_id: int, num_blocks: int, home: int, ids: list[int]) -> list[RBlock]:
        return self.loop.mover.take_for_move(req_id, num_blocks, home, ids)

    def drop_incoming(self, req_id: int, blocks: list[RBlock]) -> None:
        self.loop.mover.drop_incoming(req_id, blocks)

    def release_blocks(self, blocks: list[RBlock]) -> None:
        self.rm.release_blocks(blocks)

    def move_kvcache(self, req_id: int, num_blocks: int, dst_inst: int, src_inst: int | None) -> bool:
        """A creditor reclaiming what it lent asks the home to move it (infinite-llm 5.2)."""
        return self.rm.move_kvcache(req_id, num_blocks, dst_inst, src_inst)

    def num_moving(self, req_id: int, src_inst: int) -> int:
        return self.rm.num_moving(req_id, src_inst)

    def set_block(self, req_id: int, index: int, block: RBlock) -> None:
        self.rm.set_block(req_id, index, block)

    def alloc_for_swap(self, req_id: int) -> RBlock:
        return self.rm.alloc_for_swap(req_id)

    def has_table(self, req_id: int) -> bool:
        return req_id in self.rm.tables

    def table(self, req_id: int) -> list[RBlock] | None:
        return list(self.rm.tables[req_id]) if req_id in self.rm.tables else None


@ray.remote(max_concurrency=MAX_CONCURRENCY)
class InstanceActor:
    def __init__(self, inst_id: int, model, config: EngineConfig, device: str = "cpu",
                 heartbeat_interval_s: float = 0.0, placement: Placement = Placement(), moves=None):
        torch.set_num_threads(int(os.environ.get("REPRO_RAY_TORCH_THREADS", "1")))
        # a debtor's step waits on the thread serving it here: let it take the GIL from the loop sooner than
        # Python's default 5 ms
        sys.setswitchinterval(GIL_SWITCH_S)
        if device != "cpu":
            torch.cuda.set_device(0)
            model = model.to(device)  # (LlamaModel.to: the weights on this actor's GPU)
        self.inst_id = inst_id
        self.heartbeat_interval_s = heartbeat_interval_s
        self.placement = placement  # a design's placement rules (control/placement.py), given to the instance
        self.moves = moves  # a design's rule for moving requests whole (control/request_move.py RequestMoves)
        self.config = config
        self.model = model
        self.device = torch.device(device)
        caches = LocalBackend(model, config, self.device, inst_ids=[inst_id], eager=True).caches  # (no graphs)
        self.caches = {tier: kv for (_, tier), kv in caches.items()}
        self.loop: InstanceLoop | None = None
        self.requests: PeerRequests | None = None
        self.thread: threading.Thread | None = None
        self.turns = InTurn()

    def free_address(self) -> str:
        return free_address()

    def module_file(self) -> str:
        return reference_impl.__file__

    def start(self, handles: dict, gmanager, spec: GroupSpec) -> None:
        """Join the data plane and start the loop; every member is started at once (the group forms)."""
        self.loop = InstanceLoop(self.inst_id, self.config, self.model, self.caches, self.device, gmanager, handles,
                                 self.heartbeat_interval_s, self.placement, self.moves)
        self.requests = PeerRequests(self.loop)
        plane = self.make_plane(spec)
        self.thread = threading.Thread(target=self.loop.run, args=(plane,), daemon=True)
        self.thread.start()

    def make_plane(self, spec: GroupSpec) -> DataPlane:
        return DataPlane(spec, self.inst_id, self.device)

    def reform(self, spec: GroupSpec, dead: list[int], homed_there: list[int]) -> None:
        """Join a new group without the dead instances (the loop does it at its next iteration boundary)."""
        self.loop.post(Reform(spec, dead, homed_there, self.make_plane))

    def stop(self) -> None:
        if self.loop is not None:
            self.loop.post(Stop())

    # --- driver: dispatch, results, observation
    def add_request(self, seq: Sequence) -> None:
        self.loop.post(AddRequest(seq))

    def abort(self, req_id: int) -> None:
        """Drop a request (it failed): its blocks and reservations are freed at the next control phase."""
        self.loop.post(Abort(req_id))

    def migrate(self, msg: Migrate) -> None:
        """Start a live migration of a request running here (migration.py) at the next control phase."""
        self.loop.post(msg)

    def take_results(self):
        """(new tokens {req_id: (first index, tokens)}, finished [(req_id, placement, preemptions)], snapshot)."""
        return self.wait_results(0.0)

    def wait_results(self, hold_s: float):
        """`take_results` once this instance has results or its loop broke, or after `hold_s` without: the
        driver's one call outstanding per instance, answered as a step reports (no polling of the actor)."""
        loop = self.loop
        tokens, finished = loop.outbox.take(hold_s, lambda: loop.snapshot.state == BROKEN)
        return tokens, finished, loop.snapshot  # published no earlier than the reports taken

    def snapshot(self) -> Snapshot:
        return self.loop.snapshot

    def hold(self, holder) -> None:
        """Returns once the loop holds at its iteration boundary for `holder` (the driver's pause, a DGFM swap);
        it answers its mail meanwhile, and runs no control phase until every holder let go."""
        event = threading.Event()
        self.loop.post(Hold(holder, event))
        event.wait()

    def unhold(self, holder) -> None:
        self.loop.post(Unhold(holder))

    def sync_now(self) -> None:
        """While held: take in the messages waiting in the inbox, then send a heartbeat of everything changed."""
        self.loop.mailbox.call(self.loop.sync_now)

    def entries(self):
        return self.loop.mailbox.call(self.loop.rm.entries)

    # --- gManager -> home
    def move_kvcache(self, msg: MoveKVCache) -> None:
        self.loop.post(msg)

    def swap(self, msg: Swap) -> None:
        self.loop.post(msg)

    # --- peers
    def rm_call(self, sender: int, seq: int, message: PeerMessage):
        future = Future()
        self.loop.mailbox.deliver(sender, seq, message.apply, (self.requests,), future)
        return future.result()

    def rm_post(self, sender: int, seq: int, message: PeerMessage) -> None:
        self.loop.mailbox.deliver(sender, seq, message.apply, (self.requests,), None)

    def serve(self, work: PartnerWork) -> None:
        """Serve home `work.home`'s step here (in this Ray thread, beside the loop), after its earlier ones."""
        plane = self.loop.plane
        with self.turns.turn(work, plane.spec.timeout_s if plane else 60.0):
            t0, cpu0 = time.perf_counter(), time.thread_time()
            waited_s = serve(work, self.loop)
            self.loop.post(Served(time.perf_counter() - t0 - waited_s, time.thread_time() - cpu0))

    # --- the driver's (and tests') direct view of this rManager, answered by the loop
    def try_move_kvcache(self, req_id: int, num_blocks: int) -> bool:
        return self.loop.mailbox.call(self.loop.rm.try_move_kvcache, req_id, num_blocks)

    def cancel_reservation(self, req_id: int, num_blocks: int | None) -> None:
        self.loop.mailbox.call(self.loop.rm.cancel_reservation, req_id, num_blocks)

    def num_lendable(self) -> int:
        return self.loop.mailbox.call(lambda: self.loop.rm.num_lendable)
