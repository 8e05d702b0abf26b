"""Serving a workload on the Ray backend in real time: each request joins the engine at its arrival time, the
instances run their own loops, the driver collects tokens as they come, and the records are the simulator's
(`sim/metrics.py`: per-request arrival, first token, finish; tokens per collection), so a serving experiment
summarises a Ray run and a simulated run alike.

Systems are policies of the same engine: Infinite-LLM pools KV across instances; vLLM-M keeps it on its
instance (preempt and recompute, reject what no instance holds); vLLM-S is one instance with every block.
"""
import time

import numpy as np
import ray

from reference_impl.backends.ray import RayConfig, RayEngine, init_ray
from reference_impl.engine import EngineConfig
from reference_impl.errors import InputError
from reference_impl.model import LlamaModel
from reference_impl.sequence import Sequence
from reference_impl.sim.metrics import FINISHED, REJECTED, RequestMetrics, SimResult

SYSTEMS = ("infinite-llm", "vllm-m", "vllm-s")


def system_config(system: str, num_instances: int, blocks_per_instance: int, block_size: int,
                  seed: int = 0) -> EngineConfig:
    """The engine config of a system on `num_instances` instances of `blocks_per_instance` rBlocks each."""
    if system == "infinite-llm":
        return EngineConfig(num_instances, blocks_per_instance, block_size=block_size, seed=seed)
    if system == "vllm-m":
        return EngineConfig(num_instances, blocks_per_instance, block_size=block_size, pooling=False, seed=seed)
    if system == "vllm-s":
        return EngineConfig(1, num_instances * blocks_per_instance, block_size=block_size, pooling=False, seed=seed)
    raise InputError(f"unknown system {system!r}; choose one of {', '.join(SYSTEMS)}")


def serve(model: LlamaModel, requests, config: EngineConfig, ray_config: RayConfig = RayConfig(), *,
          seed: int = 0, time_limit_s: float = 600.0) -> SimResult:
    """Run `requests` (workloads.Request: arrival_s, prompt_len, output_len) against the clock on Ray actors.
    Prompts are random token ids from `seed`; each request generates exactly its output_len tokens. Requests
    the cluster cannot hold are rejected; those still running at `time_limit_s` stay unfinished."""
    rng = np.random.default_rng(seed)
    vocab = model.config.vocab_size
    records = [RequestMetrics(r.req_id, r.arrival_s, r.prompt_len, r.output_len) for r in requests]
    prompts = [rng.integers(0, vocab, r.prompt_len).tolist() for r in requests]
    order = sorted(range(len(requests)), key=lambda i: requests[i].arrival_s)
    started = init_ray(ray_config)
    try:
        engine = RayEngine(config, model, ray_config)
        try:
            result = run_clock(engine, requests, prompts, records, order, time_limit_s)
        finally:
            engine.shutdown()
    finally:
        if started:
            ray.shutdown()
    return result


def run_clock(engine: RayEngine, requests, prompts, records, order, time_limit_s: float,
              poll_s: float = 0.005) -> SimResult:
    """Dispatch each request at its arrival time and collect tokens every `poll_s` while the instances run; a
    collection that brought tokens is one record of `step_end_s` / `step_tokens` (instance -1: all of them)."""
    result = SimResult(records)
    live: dict[int, tuple[Sequence, RequestMetrics]] = {}
    t0 = time.perf_counter()
    next_i = 0
    while True:
        now = time.perf_counter() - t0
        while next_i < len(order) and requests[order[next_i]].arrival_s <= now:
            i = order[next_i]
            next_i += 1
            seq = Sequence(requests[i].req_id, prompts[i], requests[i].output_len)
            try:
                records[i].inst_id = engine.add_request(seq)
                live[seq.req_id] = (seq, records[i])
            except InputError:
                records[i].status = REJECTED
        if now > time_limit_s or (not engine.has_work and next_i == len(order)):
            break
        before = sum(len(seq.output_ids) for seq, _ in live.values())
        finished = engine.poll()
        end_s = time.perf_counter() - t0
        num_tokens = sum(len(seq.output_ids) for seq, _ in live.values()) - before
        for req_id, (seq, record) in live.items():
            if seq.output_ids and record.first_token_s is None:
                record.first_token_s = end_s
        for seq in finished:
            seq_record = live.pop(seq.req_id)[1]
            seq_record.status, seq_record.finish_s = FINISHED, end_s
        if num_tokens:
            result.step_end_s.append(end_s)
            result.step_tokens.append(num_tokens)
            result.step_inst.append(-1)
        idle_s = requests[order[next_i]].arrival_s - end_s if next_i < len(order) else poll_s
        time.sleep(poll_s if engine.has_work else max(0.0, idle_s))
    for record in records:
        seq = engine.mirror.get(record.req_id)
        if seq is not None:
            record.num_preemptions = seq.num_preemptions
    result.num_steps = engine.num_steps
    result.num_moved_blocks = engine.num_moved_blocks()
    result.end_s = time.perf_counter() - t0
    return result
