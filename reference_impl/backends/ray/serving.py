"""Serving a workload on the Ray backend in real time: the wall-clock serving loop of backends/clock.py (each
request joins the engine at its arrival time, the records are the simulator's, `sim/metrics.py`), with one
"step" a collection of the tokens the instances produced while the driver slept, since the instances run their
own loops. A serving experiment so summarises a Ray run, a local run and a simulated run alike.

Systems are the simulator's policies (sim/systems.py) of the same engine: Infinite-LLM pools KV across
instances; vLLM-M keeps it on its instance (preempt and recompute, reject what no instance holds); vLLM-S is one
instance with every block.
"""
import time

import ray

from reference_impl.backends.clock import serve_on_clock
from reference_impl.backends.local import random_prompts
from reference_impl.backends.ray import RayConfig, RayEngine, init_ray
from reference_impl.engine import EngineConfig
from reference_impl.model import LlamaModel
from reference_impl.sim.config import SimConfig
from reference_impl.serving.records import ServingRun as SimResult
from reference_impl.sim.systems import system_config

POLL_S = 0.005  # how long the driver sleeps between collections while the instances have work


def engine_config(system: str, num_instances: int, blocks_per_instance: int, block_size: int,
                  seed: int = 0) -> EngineConfig:
    """The engine config of `system` on `num_instances` instances of `blocks_per_instance` rBlocks each: the
    simulator's policy decides the instances and the pooling, and the cluster's rBlocks are shared among the
    instances it keeps (vLLM-S: one instance holds them all)."""
    policy = system_config(system, SimConfig(num_instances=num_instances, block_size=block_size, seed=seed))
    blocks = num_instances * blocks_per_instance // policy.num_instances
    return EngineConfig(policy.num_instances, blocks, block_size=block_size, pooling=policy.pooling, seed=seed)


class _Collecting:
    """The Ray engine as serve_on_clock's engine: `step` sleeps `poll_s` while the instances run, then collects
    their tokens and finished requests."""

    def __init__(self, engine: RayEngine, poll_s: float):
        self.engine, self.poll_s = engine, poll_s

    def add_request(self, seq) -> int:
        return self.engine.add_request(seq)

    @property
    def has_work(self) -> bool:
        return self.engine.has_work

    @property
    def num_steps(self) -> int:
        return self.engine.num_steps

    def step(self) -> list:
        time.sleep(self.poll_s)
        return self.engine.poll()


def serve(model: LlamaModel, requests, config: EngineConfig, ray_config: RayConfig = RayConfig(), *,
          seed: int = 0, time_limit_s: float = 600.0, poll_s: float = POLL_S) -> SimResult:
    """Run `requests` (workloads.Request: arrival_s, prompt_len, output_len) against the clock on Ray actors.
    Prompts are random token ids from `seed`; each request generates exactly its output_len tokens. Requests
    the cluster cannot hold are rejected; those still running at `time_limit_s` stay unfinished."""
    prompts = random_prompts(requests, model.config.vocab_size, seed)
    started = init_ray(ray_config)
    try:
        engine = RayEngine(config, model, ray_config)
        try:
            result = serve_on_clock(_Collecting(engine, poll_s), requests, prompts, time_limit_s=time_limit_s)
            result.num_moved_blocks = engine.num_moved_blocks()
        finally:
            engine.shutdown()
    finally:
        if started:
            ray.shutdown()
    return result
