"""Live-migration comparator (distkv-llm Fig 9): a request outgrows one GPU's KV capacity.

Three ways to go on once the request's KV reaches the single-GPU capacity C:
  Infinite-LLM   keep decoding on the GPU; tokens beyond C live on a neighbour (creditor), and from then on
                 `move_tokens_per_step` tokens of KV a step move there too (overlapped) until the two
                 halves are even. Each layer of each step sends the query and the new token's K/V to the
                 creditor and gets (out, lse) back (the "communication" bar); the two attentions run in
                 parallel, so a step reads max(local, remote) tokens' KV.
  vLLM migrate   stop, start a TP2 instance: fetch the weights from object storage, load the safetensors,
                 move the KV over the link or recompute it there (whichever is faster), decode the rest on TP2.
  Llumnix-style  the same TP2 instance, but provisioning starts when the KV reaches `trigger_fraction` of C
                 and the KV is pre-copied in stages while decoding goes on: each stage copies the tokens
                 the previous one left behind, until one stage's copy is shorter than a decode step; only
                 that last stage (and any provisioning not hidden by the lead time) stops the request.
Prefill of the prompt runs on the single GPU in every case. Step times come from the calibrated model.
"""
from dataclasses import dataclass

from reference_impl.calibration import CalibratedPerfModel
from reference_impl.errors import InputError
from reference_impl.calibration.links import INTRA_NODE
from reference_impl.calibration.perf_model import InstanceLoad, causal_prefill_pairs

MAX_PRECOPY_STAGES = 30


@dataclass(frozen=True, slots=True)
class MigrationSetting:
    model: str = "llama2-7b"
    gpu: str = "A100-80GB-SXM"
    link: str = INTRA_NODE  # between the GPU and its neighbour / the new instance's GPUs
    object_store_gb_s: float = 1.0  # assumption (the paper names Amazon S3, no bandwidth): multi-part download
    load_gb_s: float = 2.0  # assumption: safetensors file to GPU memory, per GPU
    trigger_fraction: float = 0.9  # Llumnix-style: provisioning starts at this share of the capacity
    move_tokens_per_step: int = 16  # Infinite-LLM: KV moved to the creditor per decode step (0: overflow only)

    def __post_init__(self):
        for name in ("object_store_gb_s", "load_gb_s"):
            if not getattr(self, name) > 0:
                raise InputError(f"{name} must be > 0 (got {getattr(self, name)!r})")
        if self.move_tokens_per_step < 0:
            raise InputError(f"move_tokens_per_step must be >= 0 (got {self.move_tokens_per_step!r})")
        if not 0 < self.trigger_fraction <= 1:
            raise InputError(f"trigger_fraction must be in (0, 1] (got {self.trigger_fraction!r})")


@dataclass(frozen=True, slots=True)
class Completion:
    scheme: str
    compute_s: float
    migration_s: float = 0.0
    communication_s: float = 0.0

    @property
    def total_s(self) -> float:
        return self.compute_s + self.migration_s + self.communication_s


@dataclass(frozen=True, slots=True)
class LinearStep:
    """Decode step time of one request as fixed_s + per_token_s x context (exact for the calibrated model)."""

    fixed_s: float
    per_token_s: float

    @classmethod
    def of(cls, model: CalibratedPerfModel) -> "LinearStep":
        t0 = model.num_layers * model.layer_time_s(InstanceLoad(1, 0))
        t1 = model.num_layers * model.layer_time_s(InstanceLoad(1, 1))
        return cls(t0, t1 - t0)

    def at(self, context: int) -> float:
        return self.fixed_s + self.per_token_s * context

    def total_s(self, start: int, steps: int) -> float:
        """Sum of the step times at contexts start, start + 1, ..., start + steps - 1."""
        return steps * self.fixed_s + self.per_token_s * (steps * start + steps * (steps - 1) / 2)


class MigrationComparator:
    def __init__(self, setting: MigrationSetting = MigrationSetting()):
        self.setting = setting
        self.one = CalibratedPerfModel.for_setting(model=setting.model, gpu=setting.gpu, tp=1, link=setting.link)
        self.two = CalibratedPerfModel.for_setting(model=setting.model, gpu=setting.gpu, tp=2, link=setting.link)
        self.capacity = self.one.memory.kv_capacity_tokens
        self.step_one, self.step_two = LinearStep.of(self.one), LinearStep.of(self.two)

    def check(self, prompt: int, output: int) -> None:
        if prompt <= 0 or output <= 0:
            raise InputError(f"prompt and output lengths must be > 0 (got {prompt}, {output})")
        if prompt > self.capacity:
            raise InputError(f"a {prompt}-token prompt does not fit one GPU ({self.capacity} tokens)")

    def prefill_s(self, tokens: int, model: CalibratedPerfModel | None = None) -> float:
        model = model or self.one
        load = InstanceLoad(0, 0, prefill_tokens=tokens, prefill_attn_pairs=causal_prefill_pairs(tokens))
        return model.num_layers * model.layer_time_s(load)

    def _before_capacity(self, prompt: int, output: int) -> tuple[float, int, int]:
        """(prefill + decode time on one GPU until the capacity, steps done, steps left)."""
        total = prompt + output
        steps_one = min(output, self.capacity - prompt)
        return self.prefill_s(prompt) + self.step_one.total_s(prompt, steps_one), steps_one, total - prompt - steps_one

    def infinite_llm(self, prompt: int, output: int) -> Completion:
        self.check(prompt, output)
        compute, steps_one, steps_left = self._before_capacity(prompt, output)
        m, step = self.one, self.step_one
        comm = m.num_layers * (m.link.time_s(3 * m.query_bytes) + m.link.time_s(m.result_bytes))  # q, new K/V; (out, lse)
        chunk = self.setting.move_tokens_per_step
        local, remote, stall = self.capacity, 0, 0.0
        for _ in range(steps_left):
            remote += 1  # the new token's K/V is written where the tail rBlock lives: the creditor
            step_s = step.at(max(local, remote))
            compute += step_s
            move = min(chunk, max(0, (local - remote) // 2))  # gManager evens the attention work out
            if move:
                stall += max(0.0, m.kv_transfer_s(move) - step_s)  # overlapped with the step
                local, remote = local - move, remote + move
        return Completion("Infinite-LLM", compute, communication_s=steps_left * comm + stall)

    def provision_s(self) -> float:
        s, mem = self.setting, self.two.memory
        weights_total = mem.weight_bytes_per_gpu * self.two.tp
        return weights_total / (s.object_store_gb_s * 1e9) + mem.weight_bytes_per_gpu / (s.load_gb_s * 1e9)

    def kv_move_s(self, tokens: int) -> float:
        """Move `tokens` of KV to the TP2 instance (each of its GPUs takes its heads), or recompute it there."""
        send = self.one.link.time_s(tokens * self.one.memory.kv_bytes_per_token_per_gpu / self.two.tp)
        return min(send, self.prefill_s(tokens, self.two))

    def vllm_migrate(self, prompt: int, output: int) -> Completion:
        self.check(prompt, output)
        compute, steps_one, steps_left = self._before_capacity(prompt, output)
        if not steps_left:
            return Completion("vLLM migrate", compute)
        context = prompt + steps_one
        compute += self.step_two.total_s(context, steps_left)
        return Completion("vLLM migrate", compute, migration_s=self.provision_s() + self.kv_move_s(context))

    def llumnix_precopy(self, prompt: int, output: int) -> Completion:
        self.check(prompt, output)
        compute, steps_one, steps_left = self._before_capacity(prompt, output)
        if not steps_left:
            return Completion("Llumnix pre-copy", compute)
        cap = self.capacity
        trigger = max(prompt, int(self.setting.trigger_fraction * cap))
        lead_s = self.step_one.total_s(trigger, cap - trigger) + (self.prefill_s(prompt) if trigger == prompt else 0.0)
        stall = max(0.0, self.provision_s() - lead_s)
        pending, downtime = cap, 0.0  # stage 0 copies all the KV once the instance is up
        for _ in range(MAX_PRECOPY_STAGES):
            copy_s = self.kv_move_s(pending)
            if copy_s <= self.step_one.at(cap):
                downtime = copy_s
                break
            pending = max(1, int(copy_s / self.step_one.at(cap)))  # tokens decoded meanwhile
        else:
            downtime = self.kv_move_s(pending)
        compute += self.step_two.total_s(cap, steps_left)
        return Completion("Llumnix pre-copy", compute, migration_s=stall + downtime)

    def compare(self, prompt: int, output: int) -> list[Completion]:
        return [self.infinite_llm(prompt, output), self.vllm_migrate(prompt, output),
                self.llumnix_precopy(prompt, output)]
