"""rBlocks: fixed-size pieces of one request's KV, and the physical pool of one instance (distkv-llm 4.3).

The pool has a device tier (GPU memory) and a CPU tier; allocation takes the first free device block, then
the first free CPU block. `RBlock` is one row of the logical-to-physical table of distkv-llm Figure 3.
"""
from dataclasses import dataclass

DEVICE = "device"
CPU = "cpu"
TIERS = (DEVICE, CPU)


@dataclass(frozen=True, slots=True)
class RBlock:
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

    def alloc(self, req_id: int) -> tuple[str, int]:
        for tier in TIERS:
            if self.free_list[tier]:
                address = self.free_list[tier].pop()
                self.owner[(tier, address)] = req_id
                return tier, address
        raise MemoryError("no free rBlock")

    def free(self, device: str, address: int) -> int:
        req_id = self.owner.pop((device, address))
        self.free_list[device].append(address)
        return req_id
