"""Ray backend: every instance (model replica, rManager, scheduler, rBlock caches) is a Ray actor running its
own serving loop (loop.py) that waits only for the partners of its step, the gManager an actor running its rounds
on its own timer, and the driver only dispatches arrivals and collects tokens (engine.py). Control messages of
protocol.py travel as actor calls into each loop's mailbox; the data plane (DistAttention's per-layer queries and
`(out, lse)`, KV blocks that move) goes over torch.distributed between partners (dataplane.py, step.py,
serve.py): gloo on CPU, NCCL on GPU.
"""
import time
from dataclasses import dataclass, field

import ray

from reference_impl.backends.local import check_prompts
from reference_impl.backends.ray.cluster import STRATEGIES, RayConfig, check_reachable, init_ray
from reference_impl.backends.ray.engine import RayEngine
from reference_impl.backends.ray.stats import LoopStats
from reference_impl.control.engine import EngineConfig
from reference_impl.errors import InputError
from reference_impl.model.llama import LlamaModel
from reference_impl.control.sequence import Sequence

__all__ = ["STRATEGIES", "LoopStats", "RayConfig", "RayEngine", "RayGenerationResult", "check_reachable", "generate",
           "init_ray"]


@dataclass(slots=True)
class RayGenerationResult:
    token_ids: list[list[int]]
    placement: list[dict[int, int]]  # per request: inst_id -> rBlocks when it finished
    failed: dict[int, str] = field(default_factory=dict)  # request index -> reason
    num_steps: int = 0
    num_preemptions: int = 0
    num_gmanager_restarts: int = 0
    num_instance_failures: int = 0
    wall_s: float = 0.0
    messaging_s_per_step: float = 0.0  # per instance and step: partner calls sent, peers' replies waited for


def generate(model: LlamaModel, prompts: list[list[int]], max_new_tokens: int, config: EngineConfig,
             ray_config: RayConfig = RayConfig(), *, ignore_eos: bool = False, on_poll=None) -> RayGenerationResult:
    """Greedy generation of every prompt with each instance a Ray actor; `on_poll(engine)` runs after each
    collection of results. Starts a private Ray (and shuts it down) unless Ray is already initialised or
    `ray_config.address` is set."""
    check_prompts(model, prompts)
    if max_new_tokens < 1:
        raise InputError("--max-new-tokens must be >= 1")
    started = init_ray(ray_config)
    try:
        engine = RayEngine(config, model, ray_config)
        try:
            eos = None if ignore_eos else model.config.eos_token_id
            seqs = [Sequence(i, list(p), max_new_tokens, eos) for i, p in enumerate(prompts)]
            t0 = time.perf_counter()
            for seq in seqs:
                engine.add_request(seq)
            engine.run(on_poll=on_poll)
            wall_s = time.perf_counter() - t0
            stats = engine.stats().values()
            total = LoopStats.total(stats)
            return RayGenerationResult([s.output_ids for s in seqs], [s.placement for s in seqs], dict(engine.failed),
                                       engine.num_steps, sum(s.num_preemptions for s in seqs),
                                       max((s.num_gmanager_restarts for s in stats), default=0),
                                       engine.num_instance_failures, wall_s,
                                       total.messaging_s / max(1, total.num_steps))
        finally:
            engine.shutdown()
    finally:
        if started:
            ray.shutdown()
