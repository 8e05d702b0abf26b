"""The Ray backend's scaling runs behind `repro bench ray`: workloads, one N-instance engine, N independent ones."""
import os
import statistics
import time
from dataclasses import dataclass, replace

import click
import numpy as np

from reference_impl.backends.local import generate as local_generate
from reference_impl.backends.ray import RayEngine
from reference_impl.backends.ray.stats import LoopStats, StepMeans
from reference_impl.control.engine import EngineConfig
from reference_impl.control.sequence import Sequence, num_blocks_for
from reference_impl.model.device_time import DeviceTimeModel
from reference_impl.model.llama import ModelConfig, random_model
from reference_impl.model.resolve import resolve_model

POLL_S = 0.02  # between the driver's looks at the N independent engines' reports


@dataclass(frozen=True, slots=True)
class Workload:
    prompts: list[list[int]]
    homes: list[int]  # the instance each request is dispatched to
    max_new_tokens: int
    config: EngineConfig  # of the N-instance engine


@dataclass(frozen=True, slots=True)
class ScalingRun:
    num_instances: int
    pooling: str
    model: str
    num_tokens: int  # generated per repeat
    tok_s: float  # median over repeats
    tok_s_runs: list[float]
    step_ms: float  # per instance and step (means over the instances' steps)
    control_ms: float  # the control phase: postprocess, inbox, moves, schedule, plan, heartbeat
    compute_ms: float  # the model's own work (device time for device-time models)
    compute_cpu_ms: float  # ... in the loop thread's CPU time (below compute_ms when the core is shared)
    wait_ms: float  # waiting for partners on the data plane (a debtor for its creditors' answers)
    messaging_ms: float  # partner calls sent, peers' and the gManager's replies waited for
    debtor_step_ms: float | None  # pooling on: the even instances (their KV spreads) ...
    debtor_wait_ms: float | None
    creditor_step_ms: float | None  # ... and the odd ones (they lend and serve MicroAttention)
    served_compute_ms: float | None  # a creditor's work for one served debtor step (MicroAttention, KV stores)
    peer_calls_per_step: float  # control-phase calls on a peer's rManager that wait for the reply ...
    peer_call_ms: float | None  # ... and the mean round trip of one (None: no call)
    num_moved_blocks: int
    independent_tok_s: float | None  # N single-instance engines run at once with the same requests
    load_before: float
    load_after: float

    @classmethod
    def make(cls, n, pooling, model, run: "EngineRun", independent, load_before, load_after) -> "ScalingRun":
        every, debtor, creditor = (StepMeans.of(run.stats_of(insts)) for insts in run.roles())
        pooled = pooling == "on"
        calls = every.num_peer_calls
        return cls(n, pooling, model, run.num_tokens, statistics.median(run.tok_s), run.tok_s,
                   every.step_ms, every.control_ms, every.compute_ms, every.compute_cpu_ms, every.wait_ms,
                   every.messaging_ms, debtor.step_ms if pooled else None, debtor.wait_ms if pooled else None,
                   creditor.step_ms if pooled else None, every.serve_ms if pooled else None,
                   calls / max(1, sum(every.num_steps.values())), every.peer_call_each_ms if calls else None,
                   every.num_copied_blocks, independent, load_before, load_after)


@dataclass(frozen=True, slots=True)
class EngineRun:
    """The N-instance engine's repeats: tokens, tok/s per repeat, each instance's loop statistics over them."""

    num_instances: int
    num_tokens: int  # generated per repeat
    tok_s: list[float]
    stats: dict[int, LoopStats]  # per instance, summed over the repeats

    def roles(self) -> tuple[list[int], list[int], list[int]]:
        """(every instance, the debtors: even ones with an odd neighbour, the creditors: odd ones)."""
        n = self.num_instances
        return list(range(n)), [i for i in range(n) if i % 2 == 0 and i + 1 < n], [i for i in range(n) if i % 2]

    def stats_of(self, insts) -> dict[int, LoopStats]:
        return {i: self.stats[i] for i in insts if i in self.stats}


def load_average() -> float:
    return os.getloadavg()[0]


def bench_model(spec: str, layers: int, hidden: int, seed: int):
    """(model the instances run, model with the same tokens for the local reference run)."""
    if spec == "random":
        heads = max(1, hidden // 64)
        config = ModelConfig(vocab_size=4096, hidden_size=hidden, intermediate_size=hidden * 8 // 3,
                             num_layers=layers, num_heads=heads, num_kv_heads=max(1, heads // 4))
        model = random_model(config, seed=seed)
    else:
        model = resolve_model(spec, seed=seed)
    if isinstance(model, DeviceTimeModel):
        return model, DeviceTimeModel(0.0, model.inner)
    return model, model


def _prompts(rng, vocab: int, count: int, length: int) -> list[list[int]]:
    return [rng.integers(0, vocab, length).tolist() for _ in range(count)]


def uniform_workload(model, n, per_instance, prompt_len, max_new, block_size, seed) -> Workload:
    """Every instance the same requests' load, KV roomy: nothing spreads, nothing is shared."""
    rng = np.random.default_rng(seed)
    blocks = per_instance * num_blocks_for(prompt_len + max_new, block_size)
    config = EngineConfig(n, blocks, block_size=block_size, max_batch_size=per_instance, pooling=False, seed=seed)
    prompts = _prompts(rng, model.config.vocab_size, n * per_instance, prompt_len)
    return Workload(prompts, [i % n for i in range(len(prompts))], max_new, config)


def pooled_workload(model, n, per_instance, prompt_len, max_new, block_size, seed) -> Workload:
    """Even instances (debtors) get requests needing 1.5x their memory, odd ones (creditors) 0.5x: the debtors
    borrow the creditors' room, and every debtor step attends over KV on creditors."""
    rng = np.random.default_rng(seed)
    capacity = per_instance * num_blocks_for(prompt_len + max_new, block_size)
    long_len = max(1, (3 * capacity * block_size) // (2 * per_instance) - max_new)
    short_len = max(1, (capacity * block_size) // (2 * per_instance) - max_new)
    prompts, homes = [], []
    for inst in range(n):
        debtor = inst % 2 == 0 and inst + 1 < n
        prompts += _prompts(rng, model.config.vocab_size, per_instance, long_len if debtor else short_len)
        homes += [inst] * per_instance
    config = EngineConfig(n, capacity, block_size=block_size, max_batch_size=per_instance, pooling=True, seed=seed)
    return Workload(prompts, homes, max_new, config)


def _start(engine, work: Workload, first_id: int) -> list[Sequence]:
    seqs = [Sequence(first_id + i, list(p), work.max_new_tokens) for i, p in enumerate(work.prompts)]
    for seq, home in zip(seqs, work.homes):
        engine.add_request(seq, home)
    return seqs


def _stats_delta(engine, before: dict[int, LoopStats]) -> dict[int, LoopStats]:
    time.sleep(0.05)  # the stats of the last step are published at the next control phase
    engine.poll()
    return {i: s - before.get(i, LoopStats()) for i, s in engine.stats().items()}


def run_engine(model, reference_model, work: Workload, ray_config, repeats: int) -> EngineRun:
    """The N-instance engine: tok/s per repeat (after a warm-up), where a step's time goes, tokens checked."""
    roomy = EngineConfig(1, sum(num_blocks_for(len(p) + work.max_new_tokens, work.config.block_size)
                                for p in work.prompts), block_size=work.config.block_size)
    want = local_generate(reference_model, work.prompts, work.max_new_tokens, roomy, ignore_eos=True).token_ids
    engine = RayEngine(work.config, model, ray_config)
    try:
        seqs = _start(engine, work, 10_000)  # warm-up: first steps of fresh actors
        engine.run()
        tok_s, deltas = [], []
        for r in range(repeats):
            before = engine.stats()
            t0 = time.perf_counter()
            seqs = _start(engine, work, 20_000 * (r + 1))
            engine.run()
            wall_s = time.perf_counter() - t0
            if [s.output_ids for s in seqs] != want:
                raise click.ClickException("the Ray backend's tokens differ from the local backend's")
            tok_s.append(sum(len(s.output_ids) for s in seqs) / wall_s)
            deltas.append(_stats_delta(engine, before))
    finally:
        engine.shutdown()
    stats = {i: LoopStats.total(d[i] for d in deltas if i in d) for i in {i for d in deltas for i in d}}
    return EngineRun(work.config.num_instances, sum(len(t) for t in want), tok_s, stats)


def run_independent(model, work: Workload, ray_config, repeats: int) -> float:
    """N single-instance engines serving the same requests at once; median tok/s over repeats."""
    n = work.config.num_instances
    engines = [RayEngine(replace(work.config, num_instances=1), model, ray_config) for _ in range(n)]
    try:
        tok_s = []
        for r in range(repeats + 1):  # the first is the warm-up
            t0 = time.perf_counter()
            seqs = []
            for inst, engine in enumerate(engines):
                mine = [i for i, home in enumerate(work.homes) if home == inst]
                part = Workload([work.prompts[i] for i in mine], [0] * len(mine), work.max_new_tokens, work.config)
                seqs += _start(engine, part, 30_000 * (r + 1) + 1000 * inst)
            while any(e.has_work for e in engines):
                for engine in engines:
                    engine.collect(0.0)
                time.sleep(POLL_S)
            if r:
                tok_s.append(sum(len(s.output_ids) for s in seqs) / (time.perf_counter() - t0))
    finally:
        for engine in engines:
            engine.shutdown()
    return statistics.median(tok_s)
