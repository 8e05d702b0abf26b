"""How much slower an instance's step computes while the other instances of this machine compute too: the
simulator's `EngineCosts.co_run_slowdown` for the pooled arm. The instances are processes sharing the
machine's cores and caches with each other, the driver and Ray's daemons, so a step that the CPU-time calibration
times on an idle core takes longer when every instance steps at once (measured here on the 2-core machine:
1.10-1.23x; `repro bench ray` saw 2 instances step 1.38-1.43x as long as a 1-instance engine).

Measured on a Ray engine of the arm's instances (pooling off, so nothing but the cores is shared): the same
requests served by instance 0 alone, then the same requests by every instance at once, alternating `rounds`
times; the ratio of instance 0's compute time per step, together over alone, median over the rounds, on the wall
clock and in its loop's CPU time (`cpu_ratio`: beside the others a step's work itself takes longer, the caches and
memory being shared). The pooled arm's simulator reads the CPU ratio times how much of a core a loop gets while
the cluster serves past saturation (pooled.py), since the cost model is the Ray engine's steps in CPU time.
"""
import statistics
from dataclasses import dataclass

import numpy as np

from reference_impl.backends.ray import RayEngine
from reference_impl.backends.ray.serving import loop_stats
from reference_impl.backends.ray.stats import LoopStats
from reference_impl.control.engine import EngineConfig
from reference_impl.control.sequence import Sequence, num_blocks_for


@dataclass(frozen=True, slots=True)
class CoRun:
    co_run_slowdown: float  # median over rounds of together_ms / alone_ms
    alone_ms: list[float]  # instance 0's compute per step, per round
    together_ms: list[float]
    num_instances: int
    batch: int
    cpu_ratio: float  # median over rounds of together_cpu_ms / alone_cpu_ms
    alone_cpu_ms: list[float]  # ... in its loop's CPU time
    together_cpu_ms: list[float]


def measure_co_run(model, ray_config, num_instances: int, *, batch: int = 16, prompt_len: int = 32,
                   max_new_tokens: int = 32, block_size: int = 16, rounds: int = 3, seed: int = 0) -> CoRun:
    """Instance 0's compute time per step serving `batch` requests alone and beside the other instances."""
    rng = np.random.default_rng(seed)
    prompts = [rng.integers(0, model.config.vocab_size, prompt_len).tolist() for _ in range(batch)]
    blocks = batch * num_blocks_for(prompt_len + max_new_tokens, block_size)
    config = EngineConfig(num_instances, blocks, block_size=block_size, max_batch_size=batch, pooling=False,
                          seed=seed)
    engine = RayEngine(config, model, ray_config)
    next_id = iter(range(10**9))

    def counters() -> tuple[float, float, int]:
        stats = loop_stats(engine).get(0, LoopStats())
        return stats.compute_s, stats.compute_cpu_s, stats.num_steps

    def compute_ms_per_step(homes) -> tuple[float, float]:
        """(wall, CPU) ms of instance 0's compute per step."""
        compute_s, cpu_s, steps = counters()
        for home in homes:
            for p in prompts:
                engine.add_request(Sequence(next(next_id), list(p), max_new_tokens), home)
        engine.run()
        compute_after_s, cpu_after_s, steps_after = counters()
        n = max(1, steps_after - steps)
        return 1e3 * (compute_after_s - compute_s) / n, 1e3 * (cpu_after_s - cpu_s) / n

    try:
        compute_ms_per_step([0])  # warm-up
        alone, together = [], []
        for _ in range(rounds):
            alone.append(compute_ms_per_step([0]))
            together.append(compute_ms_per_step(range(num_instances)))
    finally:
        engine.shutdown()

    def ratio(i: int) -> float:
        return statistics.median(t[i] / a[i] for t, a in zip(together, alone))

    return CoRun(ratio(0), [a[0] for a in alone], [t[0] for t in together], num_instances, batch,
                 ratio(1), [a[1] for a in alone], [t[1] for t in together])
