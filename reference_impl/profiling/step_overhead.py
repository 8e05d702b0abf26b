"""What the engine spends per step beyond the cost model's layer terms, measured through the real engine.

The model (random weights, `spec`'s shape) runs in the real `Engine` on the `LocalBackend`, in a closed loop:
decode steps of a batch of b requests at a fixed context, and prefill steps of k prompts of a typical length
(the cost model sees a prefill step's tokens, not its prompts: the per-prompt costs are taken at that length). Each step
is timed, and so is the model's part inside it (`ModelRunner.compute`: the forward pass, or its CUDA-graph replay). Per step:

    outside_s  = step - forward: scheduler, heartbeats, gManager, the KV layer's plan, LM head, sampling, Python
    in_layer_s = forward - the cost model's layer terms for that step (the op-level profile: non-attention ops,
                 KV read, prefill attention): what the engine's real layers cost beyond those ops (the KV write,
                 the attention call's fixed cost, unfused projections), the embedding and the final norm

The cost model adds their sum to each step (calibration/overhead.py). Both parts are kept in the file.
"""
import time

import numpy as np
import torch

from reference_impl.backends.local import LocalBackend
from reference_impl.calibration.overhead import median_curve_entry
from reference_impl.model.config import ModelConfig
from reference_impl.calibration.perf_model import InstanceLoad, causal_prefill_pairs, step_time_s
from reference_impl.control.engine import Engine, EngineConfig
from reference_impl.control.sequence import Sequence, num_blocks_for
from reference_impl.model.llama import random_model

class _TimedForward:
    """Wraps a backend's model part (`ModelRunner.compute`: a CUDA-graph replay or the eager forward); `last_s` is
    the duration of the latest call (synchronised on a GPU)."""

    def __init__(self, device: torch.device, now=time.perf_counter):
        self.forward, self.device, self.now, self.last_s = None, device, now, 0.0

    def __call__(self, *args):
        _sync(self.device)
        start = self.now()
        out = self.forward(*args)
        _sync(self.device)
        self.last_s = self.now() - start
        return out


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed_step(engine, timer: _TimedForward) -> tuple[float, float]:
    """(step seconds, forward seconds) of one engine step."""
    _sync(timer.device)
    start = timer.now()
    engine.step()
    _sync(timer.device)
    return timer.now() - start, timer.last_s


def measure_overhead(spec: ModelConfig, layers, *, batches, prompt_len: int, prefill_seqs, context_tokens: int,
                     repeats: int, device: torch.device, dtype: torch.dtype, seed: int, source: str,
                     now=time.perf_counter) -> dict:
    """{"decode": curve over batch size, "prefill": curve over a step's prompt tokens (k prompts of `prompt_len`),
    each with its two parts} in seconds
    per step. `layers`: the cost model of the op-level profile (a PerfModel without step overhead)."""
    model = random_model(spec, seed, dtype, device)
    timer = _TimedForward(device, now)
    block_size = EngineConfig().block_size
    rng = np.random.default_rng(seed)

    def engine_for(num_blocks: int, max_batch: int) -> Engine:
        config = EngineConfig(1, num_blocks, max_batch_size=max_batch, seed=seed)
        backend = LocalBackend(model, config, device=device)
        timer.forward, backend.runner.compute = backend.runner.compute, timer
        return Engine(config, backend)

    decode = []  # (outside_s, in_layer_s) medians per batch
    for b in batches:
        engine = engine_for(b * num_blocks_for(context_tokens + repeats + 2, block_size) + 1, b)
        for i in range(b):
            engine.add_request(Sequence(i, rng.integers(0, spec.vocab_size, context_tokens).tolist(), repeats + 2))
        engine.step()  # the prefill of all b
        engine.step()  # warm-up decode
        rows = []
        for _ in range(repeats):
            kv_tokens = engine.instances[0].rm.pool.num_used * block_size  # what the simulator counts
            step_s, forward_s = _timed_step(engine, timer)
            rows.append((step_s - forward_s, forward_s - step_time_s(layers, InstanceLoad(b, kv_tokens))))
        decode.append(np.median(rows, axis=0))
    engine = engine_for(max(prefill_seqs) * num_blocks_for(prompt_len, block_size) + 1, max(prefill_seqs))
    prefill = []
    for k in prefill_seqs:
        load = InstanceLoad(0, 0, prefill_tokens=k * prompt_len, prefill_attn_pairs=k * causal_prefill_pairs(prompt_len))
        rows = []
        for r in range(repeats + 1):  # requests finished at their prefill; the first sample warms up
            for i in range(k):
                engine.add_request(Sequence(r * k + i, rng.integers(0, spec.vocab_size, prompt_len).tolist(), 1))
            step_s, forward_s = _timed_step(engine, timer)
            rows.append((step_s - forward_s, forward_s - step_time_s(layers, load)))
        prefill.append(np.median(rows[1:], axis=0))
    tokens = [k * prompt_len for k in prefill_seqs]
    return {"decode": _entry(batches, decode, source), "prefill": _entry(tokens, prefill, source),
            "derivation": f"real Engine + LocalBackend of {spec.name} (random weights): step time minus the op-level "
                          f"layer terms; decode at {context_tokens} tokens of context, prefill of "
                          f"{list(prefill_seqs)} prompts of {prompt_len} tokens; median of {repeats} steps"}


def _entry(xs, parts, source: str) -> dict:
    """The medians' sum as a curve with knots where the cost changes (overhead.median_curve_entry), with both
    parts kept."""
    outside, in_layer = (np.array([p[i] for p in parts]) for i in range(2))
    return {**median_curve_entry(xs, outside + in_layer, source),
            "outside_forward_s": [float(f"{v:.6g}") for v in outside],
            "in_layers_s": [float(f"{v:.6g}") for v in in_layer]}
