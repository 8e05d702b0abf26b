"""Llumnix's load metric and its pairing of instances (arXiv 2406.03243 section 4.4; AlibabaPAI/llumnix
llumnix/load_computation.py RemainingStepsLoad, llumnix/global_scheduler/migration_filter.py LoadFilter and
migration_policy.py Defrag).

Freeness F = (M - sum of virtual usage) / B in tokens per request: M the instance's rBlocks less the watermark,
the virtual usage every rBlock held or reserved here (running requests' KV, room reserved for KV migrating in) plus
the rBlocks the queued requests need at admission, B the running and queued requests. An idle instance is
infinitely free. The request choice is Llumnix's local migration scheduler (llumnix/llumlet/
local_migration_scheduler.py): only running requests past their prefill and not migrating already."""
from reference_impl.control.instance import Instance
from reference_impl.control.sequence import Sequence
from reference_impl.systems.llumnix.knobs import LlumnixKnobs

INFINITELY_FREE = float("inf")


def freeness_tok(inst: Instance, watermark_blocks: int, block_size: int) -> float:
    s = inst.scheduler
    num_requests = len(s.running) + len(s.waiting)
    if not num_requests:
        return INFINITELY_FREE
    return (inst.rm.num_free - watermark_blocks - s.num_waiting_blocks) * block_size / num_requests


def has_preempted_waiting(inst: Instance) -> bool:
    """A request this instance preempted waits at the front of its queue (Llumnix's num_killed_requests > 0: such
    an instance migrates out whatever its freeness, and takes nothing in)."""
    waiting = inst.scheduler.waiting
    return bool(waiting) and waiting[0].num_preemptions > 0


def pair_instances(insts: list[Instance], knobs: LlumnixKnobs, block_size: int) -> list[tuple[Instance, Instance]]:
    """Llumnix's default pairing (defrag): the least free sources with the most free destinations, in order."""
    watermark = int(knobs.watermark_frac * insts[0].rm.pool.num_capacity) if insts else 0
    free = {i.inst_id: freeness_tok(i, watermark, block_size) for i in insts}
    preempted = {i.inst_id for i in insts if has_preempted_waiting(i)}
    sources = [i for i in insts if i.inst_id in preempted or free[i.inst_id] <= knobs.migrate_out_freeness_tok]
    if not sources:
        return []
    sources.sort(key=lambda i: (free[i.inst_id], i.inst_id))
    dests = [i for i in insts if i.inst_id not in preempted and free[i.inst_id] > knobs.migrate_out_freeness_tok]
    dests.sort(key=lambda i: (-free[i.inst_id], i.inst_id))
    return list(zip(sources, dests))


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
