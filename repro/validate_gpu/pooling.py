"""Part 4: pooling on one GPU. Instances share the device with budgets too small for their requests, so KV
spills to the others: the tokens must be one instance's; and a decode step whose KV is spread over the
instances (DistAttention: a partial per instance, merged) is timed against the same step with all KV local."""
import math
from dataclasses import asdict

import numpy as np
import torch

from reference_impl.backends.local import LocalBackend, generate
from reference_impl.control.engine import EngineConfig
from reference_impl.control.rblock import DEVICE, RBlock
from reference_impl.control.sequence import num_blocks_for
from reference_impl.model.llama import ModelConfig, random_model
from repro.validate_gpu.engine_check import remote_fraction
from repro.validate_gpu.step_timing import on_instance, sequences, timed_step_s

SEED = 0


def run(size, device: torch.device) -> dict:
    torch.backends.cuda.matmul.allow_tf32 = False
    config = ModelConfig(**asdict(size.shape))
    model = random_model(config, SEED, getattr(torch, size.dtype), device)
    rng = np.random.default_rng(SEED)
    prompts = [rng.integers(0, config.vocab_size, size.prompt_len).tolist() for _ in range(size.num_requests)]
    request_blocks = num_blocks_for(size.prompt_len + size.new_tokens, size.block_size)
    one = generate(model, prompts, size.new_tokens,
                   EngineConfig(1, size.num_requests * request_blocks + 1, block_size=size.block_size,
                                max_batch_size=size.num_requests), ignore_eos=True, device=device)
    runs = []
    for n in size.instances:
        per_instance = math.ceil(0.75 * request_blocks)  # less than one request: every request spills
        fractions = []
        cfg = EngineConfig(n, per_instance, block_size=size.block_size, max_batch_size=size.num_requests, seed=SEED)
        pooled = generate(model, prompts, size.new_tokens, cfg, ignore_eos=True, device=device,
                          on_step=lambda engine: fractions.append(remote_fraction(engine)))
        equal = [a == b for a, b in zip(pooled.token_ids, one.token_ids)]
        runs.append({"instances": n, "blocks_per_instance": per_instance, "equal": equal,
                     "max_remote_fraction": max(fractions), "steps": pooled.num_steps,
                     "most_instances_one_request": max(len(p) for p in pooled.placement)})
    # One decode step at one batch: all KV on instance 0, then each request's blocks dealt over the instances
    n = max(size.instances)
    batch, blocks = size.num_requests, request_blocks
    backend = LocalBackend(model, EngineConfig(n, batch * blocks, block_size=size.block_size), device=device)
    seqs = sequences(batch, blocks * size.block_size, config.vocab_size, rng, True)
    local = [on_instance(list(range(i * blocks, (i + 1) * blocks))) for i in range(batch)]
    # block j of a request on instance j % n: every request has a partial on each instance
    spread = [[RBlock(j, j % n, DEVICE, i * blocks + j) for j in range(blocks)] for i in range(batch)]
    step = {"batch": batch, "context": seqs[0].num_tokens, "instances": n,
            "local_s": timed_step_s(backend, seqs, local, False, 10),
            "pooled_s": timed_step_s(backend, seqs, spread, False, 10)}
    step["pooled_over_local"] = step["pooled_s"] / step["local_s"]
    ok = all(all(r["equal"]) for r in runs) and all(r["max_remote_fraction"] > 0 for r in runs)
    return {"passed": ok, "model": asdict(size.shape), "dtype": size.dtype, "requests": size.num_requests,
            "prompt_len": size.prompt_len, "new_tokens": size.new_tokens, "runs": runs, "step": step,
            "headline": {"runs_equal": sum(all(r["equal"]) for r in runs), "runs": len(runs),
                         "pooled_over_local": step["pooled_over_local"], "instances": n}}
