"""rBlocks: fixed-size pieces of one request's KV, and the physical pool of one instance (distkv-llm 4.3).

The pool has a device tier (GPU memory) and a CPU tier; allocation takes the first free device block, then
the first free CPU block. `RBlock` is one row of the logical-to-physical table of distkv-llm Figure 3.
"""
from typing import NamedTuple

DEVICE = "device"
CPU = "cpu"
TIERS = (DEVICE, CPU)


class RBlock(NamedTuple):  # (a tuple: the simulator builds one per block of every prompt)
    rblock_id: int  # logical id, unique in the cluster
    inst_id: int  # instance holding the physical block
    device: str  # DEVICE or CPU tier
    address: int  # physical block index in that tier's cache


class BlockPool:
    """Physical rBlocks of one instance; `owner` maps (device, address) -> req_id of allocated blocks."""

    def __init__(self, num_device_blocks: int, num_cpu_blocks: int = 0):
        if num_device_blocks < 0 or num_cpu_blocks < 0:
            raise ValueError("block counts must be >= 0")
        self.capacity = {DEVICE: num_device_blocks, CPU: num_cpu_blocks}
        # popped from the end: reversed so the lowest address goes first
        self.free_list = {tier: list(range(n - 1, -1, -1)) for tier, n in self.capacity.items()}
        self.owner: dict[tuple[str, int], int] = {}
        self.num_capacity = num_device_blocks + num_cpu_blocks

    @property
    def num_free(self) -> int:
        return self.num_capacity - len(self.owner)

    @property
    def num_used(self) -> int:
        return len(self.owner)

    def alloc(self, req_id: int, num_blocks: int = 1) -> list[tuple[str, int]]:
        """`num_blocks` blocks for `req_id` (device tier first, lowest address first): (tier, address) each."""
        if num_blocks > self.num_free:
            raise MemoryError(f"{num_blocks} rBlocks asked, {self.num_free} free")
        out, owner = [], self.owner
        for tier in TIERS:
            free = self.free_list[tier]
            for _ in range(min(num_blocks - len(out), len(free))):
                slot = (tier, free.pop())
                owner[slot] = req_id
                out.append(slot)
        return out

    def free(self, device: str, address: int) -> int:
        """Free one block; the request that owned it."""
        req_id = self.owner.pop((device, address))
        self.free_list[device].append(address)
        return req_id
