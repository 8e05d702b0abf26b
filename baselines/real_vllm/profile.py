"""Real vLLM's steps timed over a grid, for its calibration (reference_impl/calibration/engine_steps.py).

The grid runs as rounds of the usual runner job (baselines/real_vllm/runner.py), on the engine that then serves: decode
rounds of b requests with one prompt length each (the steps after the prompts are in, all b requests decoding),
and prefill rounds of k prompts asking for one token. A step's time is the gap between the wall-clock
stamps of consecutive steps that produced tokens, as the runner sees them from vLLM's client side.
"""
from dataclasses import dataclass

import numpy as np

from baselines.real_vllm.backend import VllmRun, random_prompts, requests_of
from baselines.real_vllm.dispatch import blocks_for
from reference_impl.calibration.engine_steps import DecodeStep, PrefillStep


@dataclass(frozen=True, slots=True)
class StepGrid:
    decode_batches: tuple[int, ...]  # at context_len
    context_len: int
    kv_batch: int  # this batch size also runs at each of kv_context_lens: the KV read slope
    kv_context_lens: tuple[int, ...]
    decode_steps: int  # timed decode steps per round (after one untimed warm-up step)
    prefill_prompts: tuple[int, ...]  # prompts per prefill step, each of prompt_len
    prompt_len: int
    prefill_repeats: int  # timed rounds per prefill size (after one untimed warm-up round)

    def decode_rounds(self) -> list[tuple[int, int]]:
        """(batch size, context) of each decode round."""
        return [(b, self.context_len) for b in self.decode_batches] + [
            (self.kv_batch, c) for c in self.kv_context_lens if c != self.context_len]


def grid_rounds(grid: StepGrid, vocab_size: int, rng: np.random.Generator) -> list[list[dict]]:
    """The runner's rounds: the decode rounds, then the prefill rounds (warm-up first for each size)."""
    rounds = []
    for b, context in grid.decode_rounds():
        rounds.append(requests_of(random_prompts([context] * b, vocab_size, rng), [grid.decode_steps + 2] * b))
    for k in grid.prefill_prompts:
        for _ in range(grid.prefill_repeats + 1):
            rounds.append(requests_of(random_prompts([grid.prompt_len] * k, vocab_size, rng), [1] * k))
    return rounds


def decode_steps(run: VllmRun, batch_size: int, context_len: int, block_size: int) -> list[DecodeStep]:
    """Timed decode steps of one decode round: steps where all `batch_size` requests decode, after a step that
    did too (so the gap between the two stamps is one such step), the first of them left out as warm-up."""
    ends, tokens = run.step_end_s, run.step_tokens
    steps = []
    for i in range(1, len(ends)):
        if tokens[i] == tokens[i - 1] == batch_size:
            generated = sum(tokens[:i]) // batch_size  # in the KV by this step (the last one written in it)
            kv = batch_size * blocks_for(context_len + generated, block_size) * block_size
            steps.append(DecodeStep(batch_size, kv, ends[i] - ends[i - 1]))
    return steps[1:]


def prefill_steps(run: VllmRun, prompt_len: int) -> list[PrefillStep]:
    """The steps of a prefill round, each of the prompts it finished: vLLM's engine core runs in its own process
    and may start on the first prompts while the rest are still being added, so k prompts can take two steps.
    A step's time is the gap to the previous stamp (the first: from the round's start)."""
    starts = [0.0, *run.step_end_s[:-1]]
    return [PrefillStep(k, prompt_len, end - start) for k, start, end in zip(run.step_tokens, starts, run.step_end_s)]


def grid_steps(grid: StepGrid, runs: list[VllmRun], block_size: int) -> tuple[list[DecodeStep], list[PrefillStep]]:
    """The timed steps of the grid's rounds (`runs`: one VllmRun per round of `grid_rounds`, in order)."""
    decode_rounds = grid.decode_rounds()
    decode = [s for (b, c), run in zip(decode_rounds, runs) for s in decode_steps(run, b, c, block_size)]
    prefill, rest = [], iter(runs[len(decode_rounds):])
    for k in grid.prefill_prompts:
        rounds = [next(rest) for _ in range(grid.prefill_repeats + 1)]
        prefill += [s for r in rounds[1:] for s in prefill_steps(r, grid.prompt_len)]
    return decode, prefill
