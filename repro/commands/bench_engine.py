"""`repro bench engine`: decode tok/s of the engine on the tiny model, one instance vs KV spread over several,
against a plain contiguous-KV decode loop of the same model measured in the same run."""
import time
from dataclasses import asdict, dataclass

import click

from repro.options import parse_int_list, seed_option


@dataclass(frozen=True, slots=True)
class EnginePoint:
    batch: int
    num_instances: int  # 0: the contiguous-KV loop
    decode_tok_s: float  # wall clock
    decode_tok_cpu_s: float  # per second of this process's CPU time: steadier on a shared machine
    remote_kv_fraction: float  # of the batch's rBlocks, at the end, held off the home instance


def contiguous_decode_tok_s(model, batch, prompt_len, num_steps, rng) -> float:
    """Prefill then greedy decode with KV in one contiguous [layers, batch, len, Hkv, D] tensor per K and V."""
    import torch

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


def engine_decode(model, batch, prompt_len, num_steps, num_instances, block_size, rng):
    """All requests homed on instance 0; with several instances its budget is 1/n of the KV, so the rest
    spills onto the others. Returns (decode tok/s, per CPU second, remote fraction of rBlocks at the end)."""
    from reference_impl.backends.local import LocalBackend
    from reference_impl.engine import Engine, EngineConfig
    from reference_impl.sequence import Sequence, num_blocks_for

    total = batch * num_blocks_for(prompt_len + num_steps, block_size)
    per_instance = -(-total // num_instances) + (num_instances > 1)
    config = EngineConfig(num_instances, per_instance, block_size=block_size, max_batch_size=batch,
                          gmanager_interval_steps=0)
    engine = Engine(config, LocalBackend(model, config))
    for i in range(batch):
        engine.instances[0].scheduler.add(Sequence(i, rng.integers(0, model.config.vocab_size, prompt_len).tolist(),
                                                   num_steps))
    engine.step()  # prefill of the whole batch
    assert len(engine.instances[0].scheduler.running) == batch, "the batch must be admitted at once"
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


@click.command("engine")
@click.option("--batches", default="1,16,64", show_default=True, help="Decode batch sizes.")
@click.option("--instances", default="1,2,4", show_default=True,
              help="Instances the batch's KV is spread over (1 = one instance holds it all).")
@click.option("--prompt-len", default=64, show_default=True, type=click.IntRange(min=1))
@click.option("--decode-steps", default=32, show_default=True, type=click.IntRange(min=2))
@click.option("--block-size", default=16, show_default=True, type=click.IntRange(min=1))
@click.option("--repeats", default=3, show_default=True, type=click.IntRange(min=1), help="Best of this many runs.")
@click.option("--threads", default=1, show_default=True, type=click.IntRange(min=1),
              help="torch CPU threads (1 keeps the comparison steady on a shared machine).")
@seed_option
@click.option("--out", type=click.Path(dir_okay=False), default=None, help="Write the points as JSON here.")
def bench_engine(batches, instances, prompt_len, decode_steps, block_size, repeats, threads, seed, out):
    """Tiny-model decode tok/s: the engine with KV on one instance or spread over several (DistAttention
    over remote rBlocks, merged with scale_reduce), and a contiguous-KV decode loop of the same model."""
    import numpy as np
    import torch

    from reference_impl.model import TINY, random_model
    from repro.atomic import check_writable_file, write_json_atomic
    from repro.progress import live_bar, say

    if out:
        check_writable_file(out, "--out")
    torch.set_num_threads(threads)
    batch_sizes = parse_int_list(batches, "--batches", minimum=1)
    counts = parse_int_list(instances, "--instances", minimum=1)
    model = random_model(TINY, seed)
    click.echo(f"tiny model ({TINY.num_layers} layers, hidden {TINY.hidden_size}, {TINY.num_heads}/"
               f"{TINY.num_kv_heads} heads), fp32 on CPU ({torch.get_num_threads()} threads), prompt {prompt_len}, "
               f"{decode_steps} decode steps, block {block_size}, best of {repeats}")
    header = f"{'batch':>6}{'contiguous':>12}" + "".join(f"{f'{n} inst':>10}" for n in counts)
    click.echo("decode tok/s, wall clock / per CPU second (the machine may be shared); remote = share of the "
               "batch's KV off its home instance; cost = 1 - (most instances) / (1 instance), per CPU second")
    click.echo(f"{header}{'remote':>8}{'cost':>8}")
    points = []
    with live_bar(desc="bench engine", total=len(batch_sizes) * repeats, unit="repeat") as bar:
        for batch in batch_sizes:
            rng = np.random.default_rng(seed)
            best = {}
            for _ in range(repeats):  # interleaved, best of each
                wall, cpu = contiguous_decode_tok_s(model, batch, prompt_len, decode_steps, rng)
                runs = {0: (wall, cpu, 0.0)}
                for n in counts:
                    runs[n] = engine_decode(model, batch, prompt_len, decode_steps, n, block_size, rng)
                for n, (wall, cpu, frac) in runs.items():
                    old = best.get(n, (0.0, 0.0, frac))
                    best[n] = (max(old[0], wall), max(old[1], cpu), frac)
                bar.update(1)
            points += [EnginePoint(batch, n, *best[n]) for n in sorted(best)]
            cols = [0] + counts
            say(bar, f"{batch:>6}" + "".join(f"{best[n][0]:>{12 if n == 0 else 10}.0f}" for n in cols), click.echo)
            row = f"{'':>6}" + "".join(f"{best[n][1]:>{12 if n == 0 else 10}.0f}" for n in cols)
            row += f"{best[max(counts)][2]:>8.2f}"
            if 1 in best and max(counts) > 1:
                row += f"{1 - best[max(counts)][1] / best[1][1]:>8.1%}"
            say(bar, row, click.echo)
    if out:
        click.echo(f"wrote {write_json_atomic(out, {'points': [asdict(p) for p in points]})}")
