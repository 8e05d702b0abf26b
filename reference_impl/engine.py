"""The cluster: instances, their rManagers and the gManager, driven step by step on any backend.

Dispatch sends a new request to the instance with the most free memory; every step each rManager sends a
heartbeat, every `gmanager_interval_steps` the gManager runs a round (recalls + Algorithm 1, then DGFM) and
its `move_kvcache` decisions go to the requests' home rManagers, which move KV in chunks.
"""
from dataclasses import dataclass

import numpy as np

from reference_impl.dgfm import execute_swap
from reference_impl.errors import InputError
from reference_impl.gmanager import GManager, GManagerConfig
from reference_impl.instance import Backend, Instance
from reference_impl.perf_model import PerfModel
from reference_impl.rmanager import RManager
from reference_impl.scheduler import Scheduler
from reference_impl.sequence import Sequence, num_blocks_for


@dataclass(frozen=True, slots=True)
class EngineConfig:
    num_instances: int = 1
    blocks_per_instance: int = 64  # device-tier rBlocks per instance
    cpu_blocks_per_instance: int = 0
    block_size: int = 16  # tokens per rBlock
    max_batch_size: int = 64
    pooling: bool = True  # False: KV never leaves its instance (vLLM-M); preempt by recompute instead
    max_lent_blocks: int | None = None  # cap on rBlocks lent to remote instances; None = no cap
    move_chunk_tokens: int = 16  # KV moved per instance and step
    gmanager_interval_steps: int = 8  # 0: no gManager rounds (spilling still asks it for creditors)
    dgfm: bool = True
    seed: int = 0

    def __post_init__(self):
        if self.num_instances < 1 or self.blocks_per_instance < 0 or self.cpu_blocks_per_instance < 0:
            raise InputError("need at least one instance and non-negative block counts")
        if self.block_size < 1 or self.max_batch_size < 1 or self.move_chunk_tokens < 1:
            raise InputError("block size, batch size and move chunk must be >= 1")

    @property
    def blocks_per_instance_total(self) -> int:
        return self.blocks_per_instance + self.cpu_blocks_per_instance


class Engine:
    def __init__(self, config: EngineConfig, backend: Backend, *, gmanager_config: GManagerConfig | None = None,
                 perf_model: PerfModel | None = None):
        self.config = config
        self.backend = backend
        self.gmanager = GManager(gmanager_config or GManagerConfig(block_size=config.block_size), perf_model)
        self.rng = np.random.default_rng(config.seed)
        recommend = self.recommend if config.pooling else None
        peers: dict = {}
        chunk = max(1, config.move_chunk_tokens // config.block_size)
        self.instances = []
        for i in range(config.num_instances):
            rm = RManager(i, config.blocks_per_instance, config.cpu_blocks_per_instance, config.max_lent_blocks, peers)
            self.instances.append(Instance(rm, Scheduler(rm, config.block_size, config.max_batch_size, recommend), chunk))
        self.rmanagers = peers
        self.num_steps = 0
        self.num_swaps = 0  # DGFM swaps carried out
        self.finished: list[Sequence] = []

    def recommend(self, debtor_inst: int, num_blocks: int) -> list[int]:
        return self.gmanager.recommend_creditors(debtor_inst, num_blocks)

    def check_fits(self, seq: Sequence) -> None:
        need = num_blocks_for(seq.num_tokens + seq.max_new_tokens, self.config.block_size)
        room = self.config.blocks_per_instance_total
        if self.config.pooling:
            room += (self.config.num_instances - 1) * min(room, self.config.max_lent_blocks or room)
        if need > room:
            raise InputError(f"request {seq.req_id} needs {need} rBlocks of {self.config.block_size} tokens but "
                             f"the {'cluster' if self.config.pooling else 'instance'} has {room}; "
                             f"raise --blocks-per-instance or --instances")

    def add_request(self, seq: Sequence) -> int:
        """Dispatch to the instance with the most free memory; returns its id."""
        self.check_fits(seq)
        inst = max(self.instances, key=lambda i: (i.rm.num_free - sum(
            num_blocks_for(s.num_tokens, self.config.block_size) for s in i.scheduler.waiting), -i.inst_id))
        inst.scheduler.add(seq)
        return inst.inst_id

    def heartbeats(self, full: bool = False) -> None:
        for inst in self.instances:
            self.gmanager.heartbeat(inst.rm.heartbeat(inst.status(), full=full))

    def restart_gmanager(self) -> None:
        """A fresh gManager (failover): the rManagers send their full state."""
        self.gmanager = GManager(self.gmanager.config, self.gmanager.perf_model)
        self.heartbeats(full=True)

    def gmanager_round(self) -> int:
        """Apply one gManager round; returns how many moves the rManagers accepted."""
        homes = self.gmanager.homes()
        accepted = sum(self.rmanagers[homes[m.req_id]].move_kvcache(m.req_id, m.num_blocks, m.dst_inst)
                       for m in self.gmanager.run_round() if m.req_id in homes)
        if self.config.dgfm:
            swap = self.gmanager.plan_dgfm(self.rng)
            if swap is not None:
                execute_swap(swap, self.rmanagers, self.backend.copy_blocks)
                self.gmanager.swap_done(swap)
                self.num_swaps += 1
        return accepted

    def step(self) -> list[Sequence]:
        self.heartbeats()
        interval = self.config.gmanager_interval_steps
        if self.config.pooling and interval and self.num_steps % interval == 0:
            self.gmanager_round()
        finished = []
        for inst in self.instances:
            finished += inst.step(self.backend)
        self.num_steps += 1
        self.finished += finished
        return finished

    @property
    def has_work(self) -> bool:
        return any(inst.has_work for inst in self.instances)

    def run(self, max_steps: int = 1_000_000, on_step=None) -> list[Sequence]:
        """Step until every request finished; `on_step(engine)` runs after each step."""
        stalled = 0
        while self.has_work and self.num_steps < max_steps:
            before = sum(len(s.output_ids) for i in self.instances for s in i.scheduler.running)
            finished = self.step()
            if on_step is not None:
                on_step(self)
            after = sum(len(s.output_ids) for i in self.instances for s in i.scheduler.running)
            stalled = 0 if finished or after != before else stalled + 1
            if stalled > 2 * self.config.num_instances + 8:
                raise InputError("no request can be admitted with this memory budget; raise --blocks-per-instance")
        return self.finished
