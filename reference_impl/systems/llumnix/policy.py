"""Llumnix's decisions in a simulated run: dispatch to the freest instance (freeness.py), a pairing round every
`pairing_period_s` while the cluster works (its first one when a request arrives at an idle cluster), migrations
(migration.py), and its counters at the end."""
from __future__ import annotations

from functools import cached_property

from reference_impl.control.sequence import Sequence
from reference_impl.errors import InputError
from reference_impl.sim.backend import SimBackend, StepOutcome
from reference_impl.sim.policy import Policy, StepHooks
from reference_impl.systems.llumnix.events import PairingRound
from reference_impl.systems.llumnix.freeness import freeness_tok
from reference_impl.systems.llumnix.knobs import LlumnixKnobs
from reference_impl.systems.llumnix.migration import ABORT_REASONS, Migrator


class LlumnixBackend(SimBackend):
    """The default step prices; before an instance schedules a step, the migrations waiting for its step boundary
    take their requests out of its batch (the policy's StepHooks.before_step)."""

    def __init__(self, config, records, **kwargs):
        super().__init__(config, records, **kwargs)
        self.before_step = None if self.hooks is None else self.hooks.before_step

    def step(self, instance, co_running: float = 0.0) -> StepOutcome:
        if self.before_step is not None:
            self.before_step(instance.inst_id)
        return super().step(instance, co_running)


class LlumnixPolicy(Policy):
    def __init__(self, config, cluster):
        super().__init__(config, cluster)
        self.knobs = config.design_knobs or LlumnixKnobs()
        if not isinstance(self.knobs, LlumnixKnobs):
            raise InputError(f"Llumnix's knobs are a LlumnixKnobs, not a {type(self.knobs).__name__}")
        self.migrator = Migrator(cluster, self.knobs)
        self.block_size = config.engine.block_size
        self.round_queued = False

    def step_hooks(self) -> StepHooks:
        return StepHooks(before_step=lambda inst_id: self.migrator.at_step_boundary(inst_id, self.cluster.now_s()))

    @cached_property
    def watermark_blocks(self) -> int:
        return int(self.knobs.watermark_frac * self.cluster.engine.config.blocks_per_instance_total)

    @property
    def runs_gmanager(self) -> bool:
        return False

    def dispatch(self, seq: Sequence) -> int | None:
        """The freest instance (ties: the lowest id), after the capacity check of vLLM-M's (KV whole on one)."""
        engine = self.cluster.engine
        if not engine.config.fits(seq):
            return None
        inst = max(engine.instances, key=lambda i: (freeness_tok(i, self.watermark_blocks, self.block_size),
                                                    -i.inst_id))
        inst.scheduler.add(seq)
        if self.knobs.enable_migration and not self.round_queued:
            self.round_queued = True
            self.cluster.schedule([PairingRound(self.cluster.now_s() + self.knobs.pairing_period_s)])
        return inst.inst_id

    def pairing_round(self, now_s: float) -> list:
        caused = self.migrator.pair(now_s)
        # the next round while anything runs or migrates; else the next arrival queues one
        self.round_queued = bool(caused or self.migrator.active or self.cluster.any_busy())
        if self.round_queued:
            caused.append(PairingRound(now_s + self.knobs.pairing_period_s))
        return caused

    def finish(self) -> None:
        c, model = self.migrator.counters, self.cluster.backend.model
        token_bytes = model.memory.kv_bytes_per_token_per_gpu * self.config.tp * self.config.pp
        self.cluster.result.design_counters.update({
            "migrations_started": c.started, "migrations_completed": c.completed,
            "migrations_aborted": sum(c.aborted.values()),
            **{f"migrations_aborted_{why}": c.aborted[why] for why in ABORT_REASONS},
            "migration_bytes": c.copied_tokens * token_bytes, "migration_precopy_rounds": c.precopy_rounds,
            "migration_pause_total_s": c.pause_total_s, "migration_pause_max_s": c.pause_max_s,
        })
