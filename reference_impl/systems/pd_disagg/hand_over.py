"""Prefill/decode disaggregation run for real on a backend whose instances run their own loops (Ray): the split's
rules given to the engine's constructor, as local.py runs them on the local engine. The first `num_prefill`
instances take every new request (the engine's dispatch over them: its `homes`); after each step a prefill
instance moves every request it prefilled whole to the freest decode instance with room (rules.freest_room, on the
decode instances' room asked then; a request moving there counts in its batch), its KV copied over the data plane;
one that no decode instance takes decodes where it is and is offered again after the next step. Pooling is off:
KV never spans instances. Greedy tokens equal one instance's."""
from dataclasses import dataclass

from reference_impl.control.engine_config import EngineConfig
from reference_impl.control.engine_run import EngineRun
from reference_impl.control.request_move import RequestMoves
from reference_impl.control.sequence import Status
from reference_impl.errors import InputError
from reference_impl.systems.pd_disagg.local import pd_engine_config
from reference_impl.systems.pd_disagg.rules import check_split, freest_room


@dataclass(frozen=True, slots=True)
class HandOver:
    """The move rule of a split of `num_instances` instances, ids below `num_prefill` prefilling (a value: the Ray
    backend hands a copy to each instance, and engines of equal rules are one)."""
    num_prefill: int
    num_instances: int

    def __post_init__(self):
        check_split(self.num_prefill, self.num_instances)

    @property
    def prefill(self) -> tuple[int, ...]:
        return tuple(range(self.num_prefill))

    def after_step(self, moves: RequestMoves) -> None:
        inst = moves.instance
        if inst.inst_id >= self.num_prefill:
            return
        ready = [s for s in inst.scheduler.running if not s.prefill_left and s.status is Status.RUNNING]
        if not ready:
            return
        rooms = moves.rooms(list(range(self.num_prefill, self.num_instances)))
        for seq in ready:
            num_blocks = len(inst.rm.tables[seq.req_id])
            k = freest_room(rooms, num_blocks, inst.scheduler.max_batch_size)
            if k is None or not moves.move(seq, rooms[k][0]):
                continue
            inst_id, free, busy = rooms[k]
            rooms[k] = (inst_id, free - num_blocks, busy + 1)


def default_num_prefill(num_instances: int) -> int:
    """A real run's split without a `num_prefill` knob: half the instances prefill (at least one, fewer than all)."""
    return min(max(1, num_instances // 2), num_instances - 1)


def hand_over(config: EngineConfig, num_prefill: int | None = None) -> tuple[EngineConfig, HandOver]:
    """`config` as the split runs it (pooling off, no gManager rounds: local.pd_engine_config's) and its rule."""
    if config.num_instances < 2:
        raise InputError("prefill/decode disaggregation needs at least 2 instances (a prefill and a decode one)")
    num_prefill = default_num_prefill(config.num_instances) if num_prefill is None else num_prefill
    return pd_engine_config(config), HandOver(num_prefill, config.num_instances)


def engine_run(config: EngineConfig, knobs=None) -> EngineRun:
    """Design.on_engine: the split of `config`'s instances (the knobs' `num_prefill`, else `default_num_prefill`),
    requests dispatched to its prefill instances."""
    config, rule = hand_over(config, getattr(knobs, "num_prefill", None))
    return EngineRun(config, homes=rule.prefill, moves=rule)
