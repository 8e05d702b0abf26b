"""Prefill/decode disaggregation run for real on the local engine (real model, real KV): the first `num_prefill`
instances only prefill, the others only decode. A new request goes to the least loaded prefill instance (rules.py);
after the step that prefilled it, the request moves whole to the freest decode instance with room (its KV copied
block for block by the backend, control/request_move.py) and decodes there. A prefilled request no decode instance
has room for waits on its prefill instance, which then decodes it (counted: `decoded_on_prefill`) rather than stall;
a request a decode instance preempts is recomputed there (vLLM's recompute; the simulator sends it back to the
prefill pool). Pooling is off: KV never spans instances. Greedy tokens equal one instance's."""
from dataclasses import dataclass, replace

from reference_impl.control.engine import Engine, EngineConfig
from reference_impl.control.request_move import move_request, refusal
from reference_impl.control.sequence import Sequence, Status
from reference_impl.errors import InputError
from reference_impl.systems.pd_disagg.rules import check_split, freest_decode, least_loaded


@dataclass(slots=True)
class HandOvers:
    moved: int = 0  # requests moved from a prefill instance to a decode instance
    moved_blocks: int = 0  # rBlocks of KV copied by those moves
    decoded_on_prefill: int = 0  # steps a prefilled request spent decoding on its prefill instance (no decode room)


class LocalPD:
    """The split on `engine`'s instances: ids below `num_prefill` prefill, the rest decode."""

    def __init__(self, engine: Engine, num_prefill: int):
        check_split(num_prefill, engine.config.num_instances)
        if engine.config.pooling:
            raise InputError("prefill/decode disaggregation runs with pooling off (pd_engine_config)")
        self.engine, self.num_prefill = engine, num_prefill
        self.prefill, self.decode = engine.instances[:num_prefill], engine.instances[num_prefill:]
        self.counts = HandOvers()
        self._no_incoming = [0] * engine.config.num_instances

    def add(self, seq: Sequence) -> int:
        """Dispatch `seq` to the least loaded prefill instance; its id."""
        self.engine.config.check_fits(seq)
        inst = least_loaded(self.prefill)
        inst.scheduler.add(seq)
        return inst.inst_id

    def hand_over(self, engine: Engine) -> None:
        """After a step: every request a prefill instance finished prefilling moves to a decode instance."""
        for src in self.prefill:
            for seq in list(src.scheduler.running):
                if seq.prefill_left or seq.status is not Status.RUNNING:
                    continue
                num_blocks = len(src.rm.tables[seq.req_id])
                dst = freest_decode(self.decode, num_blocks, self._no_incoming, engine.config.max_batch_size)
                if dst is None or refusal(src, dst, seq) is not None:
                    self.counts.decoded_on_prefill += 1
                    continue
                move_request(src, dst, seq, engine.backend.copy_blocks)
                self.counts.moved += 1
                self.counts.moved_blocks += num_blocks


def pd_engine_config(config: EngineConfig) -> EngineConfig:
    """`config` as the split runs it: pooling off (so no gManager rounds)."""
    return replace(config, pooling=False)


def generate_pd(model, prompts: list[list[int]], max_new_tokens: int, config: EngineConfig, num_prefill: int, *,
                ignore_eos: bool = False, device="cpu"):
    """backends/local.generate on a prefill/decode split of `config`'s instances (greedy): its GenerationResult and
    HandOvers. (The torch backend is imported here: the systems' modules stay torch-free.)"""
    from reference_impl.backends.local import GenerationResult, LocalBackend, check_prompts, to_device

    check_prompts(model, prompts)
    config = pd_engine_config(config)
    engine = Engine(config, LocalBackend(to_device(model, device), config, device=device))
    split = LocalPD(engine, num_prefill)
    eos = None if ignore_eos else model.config.eos_token_id
    seqs = [Sequence(i, list(p), max_new_tokens, eos) for i, p in enumerate(prompts)]
    for seq in seqs:
        split.add(seq)
    engine.run(on_step=split.hand_over)
    result = GenerationResult([s.output_ids for s in seqs], [s.placement for s in seqs], [s.logits for s in seqs],
                              engine.num_steps, sum(s.num_preemptions for s in seqs))
    return result, split.counts
