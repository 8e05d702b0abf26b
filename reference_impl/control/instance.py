"""One model replica: schedule -> execute -> postprocess, plus its share of KV movement per step.

How long a step takes and where tensors live is the backend's business (`Backend`): the local backend runs
the model on real tensors, the simulator only advances a clock. The control plane here is the same for both.
"""
from functools import partial
from typing import Protocol

from reference_impl.control.placement import Placement
from reference_impl.control.protocol import InstanceStatus
from reference_impl.control.rblock import RBlock
from reference_impl.control.rmanager import RManager
from reference_impl.control.scheduler import Scheduler
from reference_impl.control.sequence import Sequence


class Backend(Protocol):
    def execute(self, instance: "Instance", seqs: list[Sequence], is_prefill: bool) -> list[int]:
        """Run one step of `seqs` on `instance` (KV tables in instance.rm.tables); the next token of each."""

    def copy_blocks(self, pairs: list[tuple[RBlock, RBlock]]) -> None:
        """Copy KV of every source rBlock to its destination, reading all sources before writing."""


class Instance:
    def __init__(self, rmanager: RManager, scheduler: Scheduler, move_chunk_blocks: int):
        self.rm = rmanager
        self.inst_id = rmanager.inst_id  # (an attribute, not a property: the simulator reads it millions of times)
        self.scheduler = scheduler
        self.move_chunk_blocks = move_chunk_blocks

    @classmethod
    def build(cls, inst_id: int, config, recommend, *, peers: dict | None = None, changes=None, retrieval=None,
              placement: Placement = Placement()) -> "Instance":
        """Instance `inst_id` of an EngineConfig `config` (the local engine's and a Ray actor's): its rManager,
        scheduler (asking `recommend` for creditors and `retrieval` for blocks to bring home, when pooling) and
        KV-move chunk; `peers`/`changes` as RManager's; `placement`: a design's own rules, which come first."""
        blocks = placement.blocks(inst_id) if placement.blocks is not None else None
        rm = RManager(inst_id, config.blocks_per_instance if blocks is None else blocks, config.cpu_blocks_per_instance,
                      config.max_lent_blocks if blocks is None else blocks, peers,
                      exclusive_roles=config.exclusive_roles, changes=changes)
        if placement.recommend is not None:
            recommend = partial(placement.recommend, rm)
        elif not config.pooling:
            recommend = None
        fits = None if placement.fits is None else partial(placement.fits, rm)
        segments = None if placement.segments is None else partial(placement.segments, rm)
        scheduler = Scheduler(rm, config.block_size, config.max_batch_size, recommend,
                              chunked_prefill_tokens=config.chunked_prefill_tokens,
                              retrieval=placement.retrieval or retrieval, placement_fits=fits,
                              placement_segments=segments)
        return cls(rm, scheduler, max(1, config.move_chunk_tokens // config.block_size))

    @property
    def has_work(self) -> bool:
        return bool(self.scheduler.waiting or self.scheduler.running)

    def status(self) -> InstanceStatus:
        s = self.scheduler
        return InstanceStatus(self.inst_id, self.rm.pool.num_capacity, self.rm.num_free, self.rm.num_lendable,
                              len(s.running), len(s.waiting), s.mean_waiting_blocks(),
                              bool(s.waiting) and s.waiting[0].num_preemptions > 0)

    def step(self, backend: Backend) -> list[Sequence]:
        """Move one chunk of pending KV, then one engine step; returns the requests that finished."""
        seqs, is_prefill = self.begin_step(backend)
        if not seqs:
            return []
        return self.end_step(seqs, backend.execute(self, seqs, is_prefill))

    def begin_step(self, backend: Backend) -> tuple[list[Sequence], bool]:
        """The control half before execute (one KV chunk moved, the batch scheduled); a backend that runs the
        model elsewhere (the Ray actors' loops) calls it, then `end_step` with the tokens."""
        if self.rm.moves:  # (most steps move nothing)
            self.rm.advance_moves(backend.copy_blocks, self.move_chunk_blocks)
        return self.scheduler.schedule()

    def end_step(self, seqs: list[Sequence], token_ids: list[int]) -> list[Sequence]:
        return self.scheduler.postprocess(seqs, token_ids)
