"""Step prices of the split cluster: prefill instances (ids below `num_prefill`) run on the cost model of their own
shape, decode instances on the config's (the decode shape). A prefill instance's step prefills whole prompts and
never decodes: the requests it prefilled leave its batch as the step starts (their KV stays until the transfer
lands) and the policy starts their transfer at the step's end; it takes waiting prompts first come first served
up to the knobs' token budget (one longer prompt alone); a request a decode instance preempts leaves for the
prefill pool, which recomputes it (decode instances never prefill)."""
from reference_impl.control.instance import Instance
from reference_impl.control.sequence import Sequence
from reference_impl.sim.backend import SimBackend, StepOutcome
from reference_impl.systems.pd_disagg.configure import knobs_of, split_of
from reference_impl.systems.pd_disagg.split import instance_model


class PDBackend(SimBackend):
    supports_chunked_prefill = False

    def __init__(self, config, records, **kwargs):
        super().__init__(config, records, **kwargs)
        split = split_of(config)
        self.num_prefill = split.num_prefill
        self.batch_tokens = knobs_of(config).prefill_batch_tokens
        self.decode_model = self.model
        self.prefill_model = instance_model(config, split.prefill)
        self.busy_s = [0.0] * config.engine.num_instances  # time in steps that ran a batch, per instance
        # the policy's (StepHooks): (instance, seqs, duration_s), (seq), () when a decode step freed room
        hooks = self.hooks
        self.on_prefilled = None if hooks is None else hooks.on_prefilled
        self.on_preempted = None if hooks is None else hooks.on_preempted
        self.on_room = None if hooks is None else hooks.on_room

    def step(self, instance: Instance, co_running: float = 0.0) -> StepOutcome:
        s = instance.scheduler
        if instance.inst_id < self.num_prefill and self.batch_tokens is not None:
            cap = s.max_batch_size  # (the scheduler admits by count: the budget as a count for this step)
            s.max_batch_size = _prompts_within(s.waiting, self.batch_tokens, cap)
            try:
                outcome = super().step(instance, co_running)
            finally:
                s.max_batch_size = cap
        else:
            outcome = super().step(instance, co_running)
        if outcome.ran:
            self.busy_s[instance.inst_id] += outcome.duration_s
        if instance.inst_id < self.num_prefill:
            done = {seq.req_id for seq in outcome.finished}
            prefilled = [seq for seq in outcome.seqs if seq.req_id not in done]
            for seq in prefilled:
                s.remove_running(seq)
            if prefilled:
                self.on_prefilled(instance, prefilled, outcome.duration_s)
        else:
            while s.waiting:  # preempted by this step's growth (Scheduler._decode): recomputed on the prefill pool
                self.on_preempted(s.take_waiting())
            if outcome.finished:
                self.on_room()
        return outcome

    def execute(self, instance: Instance, seqs: list[Sequence], is_prefill: bool,
                co_running: float = 0.0) -> StepOutcome:
        if instance.inst_id >= self.num_prefill:
            return super().execute(instance, seqs, is_prefill, co_running)
        self.model = self.prefill_model  # (SimBackend prices with self.model; one thread runs a simulation)
        try:
            return super().execute(instance, seqs, is_prefill, co_running)
        finally:
            self.model = self.decode_model

    def transfer_s(self, num_tokens: int) -> float:
        """A whole prompt's KV from a prefill to a decode instance over the config's link: each GPU shard in
        parallel, so the side with fewer GPUs (more bytes each) sets the time."""
        return max(self.prefill_model.kv_transfer_s(num_tokens), self.decode_model.kv_transfer_s(num_tokens))

    def kv_bytes(self, num_tokens: int) -> float:
        m = self.decode_model
        return num_tokens * m.memory.kv_bytes_per_token_per_gpu * m.tp * m.pp


def _prompts_within(waiting, budget: int, cap: int) -> int:
    """How many prompts from the front of `waiting` fit `budget` tokens (at least one, at most `cap`)."""
    count, tokens = 0, 0
    for seq in waiting:
        tokens += seq.num_tokens
        if count == cap or (count and tokens > budget):
            break
        count += 1
    return max(1, count)
