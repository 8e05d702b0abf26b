"""Views of what lives in Ray actors, shaped like `RManager`, `Scheduler`, `Instance` and `GManager` so the
unchanged control plane (rmanager.py, engine.py, dgfm.py) drives them: each attribute read or call is one actor
call. Messages of protocol.py (heartbeat, move_kvcache, try_move_kvcache) travel as these calls.

Calls that clean up on a peer (release, cancel a reservation) or ask it for room succeed quietly when the peer
is dead: its blocks are gone with it, and the recovery in ray.py recomputes the requests that had KV there.
"""
import time

import ray
from ray.exceptions import RayActorError

from reference_impl.rblock import RBlock


def call(handle, name: str, *args):
    return ray.get(handle.rm_call.remote(name, *args))


class RemoteTable:
    """One request's block table on its home actor: a snapshot to read; item assignment writes through."""

    def __init__(self, handle, req_id: int, blocks: list[RBlock]):
        self.handle, self.req_id, self.blocks = handle, req_id, blocks

    def __iter__(self):
        return iter(self.blocks)

    def __len__(self) -> int:
        return len(self.blocks)

    def __getitem__(self, index: int) -> RBlock:
        return self.blocks[index]

    def __setitem__(self, index: int, block: RBlock) -> None:
        self.blocks[index] = block
        call(self.handle, "set_table_entry", self.req_id, index, block)


class RemoteTables:
    def __init__(self, handle):
        self.handle = handle

    def __contains__(self, req_id: int) -> bool:
        try:
            return call(self.handle, "has_table", req_id)
        except RayActorError:
            return False

    def __getitem__(self, req_id: int) -> RemoteTable:
        return RemoteTable(self.handle, req_id, call(self.handle, "table", req_id))


class RemoteIds:
    """The home actor's rBlock id counter (`RManager._ids`)."""

    def __init__(self, handle):
        self.handle = handle

    def __next__(self) -> int:
        return call(self.handle, "next_block_id")


class RemoteRManager:
    def __init__(self, inst_id: int, handle):
        self.inst_id = inst_id
        self.handle = handle
        self.tables = RemoteTables(handle)
        self._ids = RemoteIds(handle)

    def _quiet(self, name: str, default, *args):
        try:
            return call(self.handle, name, *args)
        except RayActorError:
            return default

    @property
    def num_free(self) -> int:
        return call(self.handle, "num_free")

    @property
    def num_lendable(self) -> int:
        return self._quiet("num_lendable", 0)

    def entries(self):
        return call(self.handle, "entries")

    def heartbeat(self, status, *, full: bool = False):
        return call(self.handle, "heartbeat", status, full)

    def move_kvcache(self, req_id: int, num_blocks: int, dst_inst: int) -> bool:
        return call(self.handle, "move_kvcache", req_id, num_blocks, dst_inst)

    def try_move_kvcache(self, req_id: int, num_blocks: int) -> bool:
        return self._quiet("try_move_kvcache", False, req_id, num_blocks)

    def take_reserved(self, req_id: int) -> RBlock:
        return call(self.handle, "take_reserved", req_id)

    def alloc_for_swap(self, req_id: int) -> RBlock:
        return call(self.handle, "alloc_for_swap", req_id)

    def release(self, block: RBlock) -> None:
        self._quiet("release", None, block)

    def cancel_reservation(self, req_id: int, num_blocks: int | None = None) -> None:
        self._quiet("cancel_reservation", None, req_id, num_blocks)

    def num_reserved_for(self, req_id: int) -> int:
        return self._quiet("num_reserved_for", 0, req_id)


class SchedulerView:
    """What the driver's `Engine` reads of an instance actor's scheduler."""

    def __init__(self, handle):
        self.handle = handle

    def _quiet(self, name: str) -> list:
        try:
            return ray.get(self.handle.sched_call.remote(name))
        except RayActorError:  # a dead instance runs nothing; the engine's recovery re-dispatches its requests
            return []

    @property
    def waiting(self) -> list:
        return self._quiet("waiting")

    @property
    def running(self) -> list:
        return self._quiet("running")

    def add(self, seq) -> None:
        ray.get(self.handle.sched_call.remote("add", seq))


class PeerFailed(RuntimeError):
    """An instance actor's step met a dead peer; its running requests were preempted for recompute."""


class InstanceHandle:
    """The driver's `Instance`: `step` runs one step in the actor and mirrors the new tokens into `mirror`."""

    def __init__(self, inst_id: int, handle, mirror: dict):
        self.inst_id = inst_id
        self.handle = handle
        self.rm = RemoteRManager(inst_id, handle)
        self.scheduler = SchedulerView(handle)
        self.mirror = mirror  # req_id -> the driver's Sequence

    @property
    def has_work(self) -> bool:
        return ray.get(self.handle.sched_call.remote("has_work"))

    def status(self):
        return ray.get(self.handle.sched_call.remote("status"))

    def step(self, backend=None) -> list:
        finished, tokens, peer_failed = ray.get(self.handle.step.remote())
        for req_id, new in tokens:
            self.mirror[req_id].output_ids.extend(new)
        done = []
        for seq in finished:
            mine = self.mirror[seq.req_id]
            mine.status, mine.placement = seq.status, seq.placement
            mine.num_preemptions = seq.num_preemptions
            done.append(mine)
        if peer_failed:
            raise PeerFailed(f"instance {self.inst_id} lost a peer mid-step")
        return done


class GManagerHandle:
    """The driver's `GManager`. When the actor restarted (a new boot id, or a call failed while it restarts),
    `failover` makes every rManager send its full placement list, then the call is made again."""

    def __init__(self, handle, failover, timeout_s: float = 60.0):
        self.handle = handle
        self.failover = failover
        self.timeout_s = timeout_s
        self.boot_id = ray.get(handle.call.remote("homes"))[0]
        self.num_restarts = 0

    def _call(self, name: str, *args):
        for _ in range(3):
            try:
                boot_id, result = ray.get(self.handle.call.remote(name, *args), timeout=self.timeout_s)
            except RayActorError:
                self._wait_alive()
                continue
            if boot_id == self.boot_id:
                return result
            self.boot_id = boot_id
            self.num_restarts += 1
            self.failover()
        raise RuntimeError(f"the gManager actor did not come back for {name!r}")

    def _wait_alive(self) -> None:
        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline:
            try:
                ray.get(self.handle.call.remote("homes"), timeout=self.timeout_s)
                return
            except RayActorError:
                time.sleep(0.05)
        raise RuntimeError("the gManager actor did not restart")

    def heartbeat(self, hb) -> None:
        self._call("heartbeat", hb)

    def homes(self) -> dict:
        return self._call("homes")

    def run_round(self) -> list:
        return self._call("run_round")

    def placement_map(self) -> dict:
        return self._call("placement_map")

    def recommend_creditors(self, debtor_inst: int, num_blocks: int) -> list[int]:
        return self._call("recommend_creditors", debtor_inst, num_blocks)

    def plan_dgfm(self, rng):
        swap, state = self._call("plan_dgfm", rng.bit_generator.state)
        rng.bit_generator.state = state
        return swap

    def swap_done(self, swap) -> None:
        self._call("swap_done", swap)

    def reset(self) -> None:
        self._call("reset")
