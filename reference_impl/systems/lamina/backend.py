"""Lamina's step costs on the simulator: a decode step is the pipelined compute / network / memory-device
attention of step_cost.py over the KV the instance's memory devices hold, every layer's round trip on the instance's
link (`config.link`) waited out where the pipeline does not fill it; a prefill step runs whole prompts on the
compute devices (the calibrated prefill, attention included, lamina 5.6) and then sends their KV to the memory
devices over the compute GPUs' NICs (the step lasts both: the KV must be there before the first decode)."""
from dataclasses import dataclass, field

from reference_impl.control.instance import Instance
from reference_impl.control.sequence import Sequence
from reference_impl.sim.backend import Pending, SimBackend, StepOutcome
from reference_impl.systems.lamina.cluster import knobs_of
from reference_impl.systems.lamina.hardware import kv_bytes_per_token, memory_attention_bytes_per_s
from reference_impl.systems.lamina.step_cost import StepPricer, kv_move_s, network_bytes, prefill_s


@dataclass(slots=True)
class LaminaCounters:
    """What the pools did in a run, per instance where a share is taken of it."""
    compute_busy_s: list = field(default_factory=list)
    memory_busy_s: list = field(default_factory=list)
    network_bytes: int = 0  # decode traffic and KV moves
    kv_move_s: float = 0.0
    kv_moves: int = 0  # prompts whose KV went to the memory devices
    pipelined_steps: int = 0
    decode_steps: int = 0


class LaminaBackend(SimBackend):
    supports_chunked_prefill = False  # lamina 5.6: prefill runs apart from decode batches

    def __init__(self, config, records, **kwargs):
        super().__init__(config, records, **kwargs)
        knobs = knobs_of(config)
        attention_bytes_per_s = knobs.attention_bytes_per_s or memory_attention_bytes_per_s(config.gpu,
                                                                                           knobs.memory_devices)
        self.pricer = StepPricer(self.model, knobs.nic_gb_s_per_gpu, attention_bytes_per_s, knobs.micro_batches)
        self.nic_gb_s_per_gpu = knobs.nic_gb_s_per_gpu
        self.kv_bytes_per_token = kv_bytes_per_token(config.model)
        n = config.engine.num_instances
        self.counters = LaminaCounters([0.0] * n, [0.0] * n)

    def execute(self, instance: Instance, seqs: list[Sequence], is_prefill: bool,
                co_running: float = 0.0) -> StepOutcome:
        counters, inst_id = self.counters, instance.inst_id
        if is_prefill:
            duration_s = 0.0 if self.prefill_elsewhere else self._prefill_s(inst_id, seqs)
        else:
            step = self.pricer.decode(len(seqs), instance.rm.pool.num_used * self.config.engine.block_size)
            duration_s = step.duration_s
            counters.compute_busy_s[inst_id] += step.compute_busy_s
            counters.memory_busy_s[inst_id] += step.memory_busy_s
            counters.network_bytes += network_bytes(self.config.model, len(seqs))
            counters.decode_steps += 1
            counters.pipelined_steps += step.micro_batches > 1
        self.meter.step_s += duration_s
        if is_prefill:
            self.meter.prefill_step_s += duration_s
        return StepOutcome(seqs, [], duration_s, len(seqs), Pending())

    def _prefill_s(self, inst_id: int, seqs: list[Sequence]) -> float:
        prompts = [seq.num_tokens for seq in seqs]
        compute_s = prefill_s(self.model, prompts)
        move_s = kv_move_s(self.config.model, sum(prompts), self.config.tp, self.nic_gb_s_per_gpu)
        counters = self.counters
        counters.compute_busy_s[inst_id] += compute_s
        counters.network_bytes += sum(prompts) * self.kv_bytes_per_token
        counters.kv_move_s += move_s
        counters.kv_moves += len(seqs)
        return compute_s + move_s
