"""Llumnix run for real on a backend whose instances run their own loops (Ray): vLLM-M's engine (pooling off, KV
whole on one instance) and Llumnix's pairing as a move rule given to every instance. Every `pairing_period_s`, an
instance that is a source by its own load (freeness at or under `migrate_out_freeness_tok`, or a preempted request
at the head of its queue) asks every instance's load, pairs them as Llumnix's global scheduler does (freeness.py
`pair_loads`) and, paired, migrates out the request its policy picks (`choose_request`) to its destination: pre-copy
stages while it decodes, then the pause (the backend's live migration, backends/ray/migration.py). Simplified:
each source pairs on the loads it asked (Llumnix: one global scheduler polling every instance), so two sources may
pick one destination, which refuses what does not fit; dispatch is the engine's (most free rBlocks), not freeness."""
from dataclasses import dataclass, replace

from reference_impl.control.engine_config import EngineConfig
from reference_impl.control.engine_run import EngineRun
from reference_impl.control.request_move import RequestMoves
from reference_impl.errors import InputError
from reference_impl.systems.llumnix.freeness import Load, choose_request, pair_loads
from reference_impl.systems.llumnix.knobs import LlumnixKnobs


@dataclass(frozen=True, slots=True)
class LlumnixMoves:
    """The move rule (control/request_move.py RequestMoves): a value, equal for equal knobs."""
    knobs: LlumnixKnobs
    block_size: int
    num_instances: int

    def after_step(self, moves: RequestMoves) -> None:
        k = self.knobs
        if not k.enable_migration or len(moves.migrating) >= k.max_migrations_per_instance \
                or not moves.due(k.pairing_period_s):
            return
        inst = moves.instance
        me = Load.of(inst)
        watermark = int(k.watermark_frac * me.num_capacity_blocks)
        if not me.preempted_waiting and me.freeness_tok(watermark, self.block_size) > k.migrate_out_freeness_tok:
            return  # not a source: nothing to ask
        loads = [me] + [Load.of_status(s) for s in moves.statuses([i for i in range(self.num_instances)
                                                                   if i != inst.inst_id])]
        dst = dict(pair_loads(loads, k, self.block_size)).get(inst.inst_id)
        seq = None if dst is None else choose_request(inst, k.request_policy, moves.migrating)
        if seq is not None:
            moves.migrate(seq, dst, max(1, k.last_stage_max_tokens // self.block_size), k.max_stages)


def engine_run(config: EngineConfig, knobs=None) -> EngineRun:
    """Design.on_engine: vLLM-M's engine of `config`'s instances with Llumnix's rule."""
    knobs = LlumnixKnobs() if knobs is None else knobs
    if not isinstance(knobs, LlumnixKnobs):
        raise InputError(f"Llumnix's knobs are a LlumnixKnobs, not a {type(knobs).__name__}")
    config = replace(config, pooling=False)
    return EngineRun(config, moves=LlumnixMoves(knobs, config.block_size, config.num_instances))
