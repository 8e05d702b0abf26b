"""Llumnix's load metric and its pairing of instances (arXiv 2406.03243 section 4.4; AlibabaPAI/llumnix
llumnix/load_computation.py RemainingStepsLoad, llumnix/global_scheduler/migration_filter.py LoadFilter and
migration_policy.py Defrag).

Freeness F = (M - sum of virtual usage) / B in tokens per request: M the instance's rBlocks less the watermark,
the virtual usage every rBlock held or reserved here (running requests' KV, room reserved for KV migrating in) plus
the rBlocks the queued requests need at admission, B the running and queued requests. An idle instance is
infinitely free. The request choice is Llumnix's local migration scheduler (llumnix/llumlet/
local_migration_scheduler.py): only running requests past their prefill and not migrating already."""
from dataclasses import dataclass

from reference_impl.control.instance import Instance
from reference_impl.control.protocol import InstanceStatus
from reference_impl.control.sequence import Sequence
from reference_impl.systems.llumnix.knobs import LlumnixKnobs

INFINITELY_FREE = float("inf")


@dataclass(frozen=True, slots=True)
class Load:
    """What Llumnix's pairing reads of one instance: of an Instance here, of a peer's InstanceStatus on Ray."""
    inst_id: int
    num_capacity_blocks: int
    num_free_blocks: int  # free less reservations
    num_requests: int  # running and queued
    num_waiting_blocks: int  # what the queued requests need at admission
    preempted_waiting: bool  # a request it preempted waits at the front of its queue

    @classmethod
    def of(cls, inst: Instance) -> "Load":
        s = inst.scheduler
        return cls(inst.inst_id, inst.rm.pool.num_capacity, inst.rm.num_free, len(s.running) + len(s.waiting),
                   s.num_waiting_blocks, has_preempted_waiting(inst))

    @classmethod
    def of_status(cls, status: InstanceStatus) -> "Load":
        return cls(status.inst_id, status.num_capacity_blocks, status.num_free_blocks,
                   status.batch_size + status.num_waiting, round(status.num_waiting * status.mean_waiting_blocks),
                   status.preempted_waiting)

    def freeness_tok(self, watermark_blocks: int, block_size: int) -> float:
        if not self.num_requests:
            return INFINITELY_FREE
        return (self.num_free_blocks - watermark_blocks - self.num_waiting_blocks) * block_size / self.num_requests


def freeness_tok(inst: Instance, watermark_blocks: int, block_size: int) -> float:
    return Load.of(inst).freeness_tok(watermark_blocks, block_size)


def has_preempted_waiting(inst: Instance) -> bool:
    """A request this instance preempted waits at the front of its queue (Llumnix's num_killed_requests > 0: such
    an instance migrates out whatever its freeness, and takes nothing in)."""
    waiting = inst.scheduler.waiting
    return bool(waiting) and waiting[0].num_preemptions > 0


def pair_loads(loads: list[Load], knobs: LlumnixKnobs, block_size: int) -> list[tuple[int, int]]:
    """Llumnix's default pairing (defrag): the least free sources with the most free destinations, in order, as
    (source, destination) instance ids."""
    watermark = int(knobs.watermark_frac * loads[0].num_capacity_blocks) if loads else 0
    free = {x.inst_id: x.freeness_tok(watermark, block_size) for x in loads}
    preempted = {x.inst_id for x in loads if x.preempted_waiting}
    sources = [i for i in free if i in preempted or free[i] <= knobs.migrate_out_freeness_tok]
    if not sources:
        return []
    sources.sort(key=lambda i: (free[i], i))
    dests = [i for i in free if i not in preempted and free[i] > knobs.migrate_out_freeness_tok]
    dests.sort(key=lambda i: (-free[i], i))
    return list(zip(sources, dests))


def pair_instances(insts: list[Instance], knobs: LlumnixKnobs, block_size: int) -> list[tuple[Instance, Instance]]:
    """`pair_loads` of instances: (source, destination) instances."""
    by_id = {i.inst_id: i for i in insts}
    return [(by_id[s], by_id[d]) for s, d in pair_loads([Load.of(i) for i in insts], knobs, block_size)]


def choose_request(inst: Instance, policy: str, migrating) -> Sequence | None:
    """The running request `inst` migrates out by `policy` (knobs.REQUEST_POLICIES), among those decoding and not in
    `migrating` (req_ids); None when there is none."""
    candidates = [s for s in inst.scheduler.running if not s.prefill_left and s.output_ids and s.req_id not in migrating]
    if not candidates:
        return None
    if policy == "LCR":
        return candidates[-1]
    if policy == "LR":
        return max(candidates, key=lambda s: s.num_tokens)
    return min(candidates, key=lambda s: s.num_tokens)
