"""A peer instance's rManager seen from inside an instance actor, shaped like `RManager` so that the unchanged
control plane (rmanager.py, dgfm.py) runs on it: each read or call is one message to the peer's actor
(ray_actors.py), made while this instance holds the control token (ray_loop.py).

Calls that clean up on a peer (release, cancel a reservation) or ask it for room succeed quietly when the peer
is dead: its blocks are gone with it, and the driver's recovery recomputes the requests that had KV there.
"""
import ray
from ray.exceptions import RayActorError

from reference_impl.rblock import RBlock


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
        ray.get(self.handle.set_table_entry.remote(self.req_id, index, block))


class RemoteTables:
    def __init__(self, handle):
        self.handle = handle

    def _table(self, req_id: int):
        try:
            return ray.get(self.handle.table.remote(req_id))
        except RayActorError:
            return None

    def __contains__(self, req_id: int) -> bool:
        try:
            return ray.get(self.handle.has_table.remote(req_id))
        except RayActorError:
            return False

    def __getitem__(self, req_id: int) -> RemoteTable:
        blocks = self._table(req_id)
        if blocks is None:
            raise KeyError(req_id)
        return RemoteTable(self.handle, req_id, blocks)


class RemoteIds:
    """The home actor's rBlock id counter (`RManager._ids`)."""

    def __init__(self, handle):
        self.handle = handle

    def __next__(self) -> int:
        return ray.get(self.handle.next_block_id.remote())


class RemoteRManager:
    def __init__(self, inst_id: int, handle):
        self.inst_id = inst_id
        self.handle = handle
        self.tables = RemoteTables(handle)
        self._ids = RemoteIds(handle)

    def _quiet(self, method, default, *args):
        try:
            return ray.get(method.remote(*args))
        except RayActorError:
            return default

    @property
    def num_free(self) -> int:
        return self._quiet(self.handle.num_free, 0)

    @property
    def num_lendable(self) -> int:
        return self._quiet(self.handle.num_lendable, 0)

    def try_move_kvcache(self, req_id: int, num_blocks: int) -> bool:
        return self._quiet(self.handle.try_move_kvcache, False, req_id, num_blocks)

    def move_kvcache(self, req_id: int, num_blocks: int, dst_inst: int, src_inst: int | None = None) -> bool:
        return self._quiet(self.handle.peer_move_kvcache, False, req_id, num_blocks, dst_inst, src_inst)

    def num_moving(self, req_id: int, src_inst: int) -> int:
        return self._quiet(self.handle.num_moving, 0, req_id, src_inst)

    def set_block(self, req_id: int, index: int, block: RBlock) -> None:
        ray.get(self.handle.set_table_entry.remote(req_id, index, block))

    def take_reserved(self, req_id: int, num_blocks: int = 1) -> list[RBlock]:
        return ray.get(self.handle.take_reserved.remote(req_id, num_blocks))

    def alloc_for_swap(self, req_id: int) -> RBlock:
        return ray.get(self.handle.alloc_for_swap.remote(req_id))

    def release(self, block: RBlock) -> None:
        self._quiet(self.handle.release, None, block)

    def cancel_reservation(self, req_id: int, num_blocks: int | None = None) -> None:
        self._quiet(self.handle.cancel_reservation, None, req_id, num_blocks)

    def num_reserved_for(self, req_id: int) -> int:
        return self._quiet(self.handle.num_reserved_for, 0, req_id)
