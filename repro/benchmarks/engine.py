"""Decode throughput of the tiny model: the engine (local backend, KV in rBlocks on one or several instances)
and a plain contiguous-KV decode loop of the same model (`repro bench engine`, the speed regression guard)."""
import time

import torch

from reference_impl.backends.local import LocalBackend
from reference_impl.control.engine import Engine, EngineConfig
from reference_impl.control.sequence import Sequence, num_blocks_for


def contiguous_decode_tok_s(model, batch, prompt_len, num_steps, rng) -> float:
    """Prefill then greedy decode with KV in one contiguous [layers, batch, len, Hkv, D] tensor per K and V."""
    c = model.config
    max_len = prompt_len + num_steps
    k_cache = torch.zeros(c.num_layers, batch, max_len, c.num_kv_heads, c.head_dim, dtype=model.dtype)
    v_cache = torch.zeros_like(k_cache)
    ids = torch.tensor(rng.integers(0, c.vocab_size, (batch, prompt_len)))
    group = c.num_heads // c.num_kv_heads

    def attend_at(length, num_new):
        def attend(layer, q, k, v):  # q [B*num_new, Hq, D]
            k_cache[layer, :, length - num_new:length] = k.view(batch, num_new, c.num_kv_heads, c.head_dim)
            v_cache[layer, :, length - num_new:length] = v.view(batch, num_new, c.num_kv_heads, c.head_dim)
            keys = k_cache[layer, :, :length].repeat_interleave(group, dim=2).transpose(1, 2)  # [B, Hq, L, D]
            values = v_cache[layer, :, :length].repeat_interleave(group, dim=2).transpose(1, 2)
            queries = q.view(batch, num_new, c.num_heads, c.head_dim).transpose(1, 2)
            out = torch.nn.functional.scaled_dot_product_attention(queries, keys, values, is_causal=num_new > 1)
            return out.transpose(1, 2).reshape(batch * num_new, c.num_heads, c.head_dim)
        return attend

    with torch.inference_mode():
        positions = torch.arange(prompt_len).repeat(batch)
        hidden = model.forward(ids.reshape(-1), positions, attend_at(prompt_len, prompt_len))
        tokens = model.logits(hidden.view(batch, prompt_len, -1)[:, -1]).argmax(-1)
        start, cpu_start = time.perf_counter(), time.process_time()
        for step in range(num_steps - 1):
            length = prompt_len + step + 1
            hidden = model.forward(tokens, torch.full((batch,), length - 1), attend_at(length, 1))
            tokens = model.logits(hidden).argmax(-1)
        tokens = batch * (num_steps - 1)
        return tokens / (time.perf_counter() - start), tokens / (time.process_time() - cpu_start)


def prefilled_engine(model, batch, prompt_len, num_steps, num_instances, block_size, rng):
    """An engine on the local backend whose `batch` requests (all homed on instance 0) are prefilled and
    admitted, each with `num_steps` tokens to generate; with several instances instance 0's budget is 1/n of
    the KV, so the rest spills onto the others."""
    total = batch * num_blocks_for(prompt_len + num_steps, block_size)
    per_instance = -(-total // num_instances) + (num_instances > 1)
    config = EngineConfig(num_instances, per_instance, block_size=block_size,
                          max_batch_size=batch).without_gmanager_rounds()
    engine = Engine(config, LocalBackend(model, config))
    for i in range(batch):
        engine.instances[0].scheduler.add(Sequence(i, rng.integers(0, model.config.vocab_size, prompt_len).tolist(),
                                                   num_steps))
    engine.step()  # prefill of the whole batch
    assert len(engine.instances[0].scheduler.running) == batch, "the batch must be admitted at once"
    return engine


def engine_decode(model, batch, prompt_len, num_steps, num_instances, block_size, rng):
    """Decode of a prefilled_engine to the end. Returns (decode tok/s, per CPU second, remote fraction of
    rBlocks at the end)."""
    engine = prefilled_engine(model, batch, prompt_len, num_steps, num_instances, block_size, rng)
    remote = [0.0]

    def measure(engine):
        if engine.num_steps != num_steps // 2:
            return
        blocks = [b.inst_id for t in engine.instances[0].rm.tables.values() for b in t]
        if blocks:
            remote[0] = sum(i != 0 for i in blocks) / len(blocks)

    start, cpu_start = time.perf_counter(), time.process_time()
    steps_before = engine.num_steps
    engine.run(on_step=measure)
    tokens = batch * (engine.num_steps - steps_before)
    return tokens / (time.perf_counter() - start), tokens / (time.process_time() - cpu_start), remote[0]
