"""`repro bench engine`: decode tok/s of the engine on the tiny model, one instance vs KV spread over several,
against a plain contiguous-KV decode loop of the same model measured in the same run."""
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

    from reference_impl.atomic import check_writable_file, write_json_atomic
    from reference_impl.model.llama import TINY, random_model
    from repro.benchmarks.engine import contiguous_decode_tok_s, engine_decode
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
