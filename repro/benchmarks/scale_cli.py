"""`repro bench scale`: CPU seconds per 1,000 requests and peak memory of the simulator from 32 to 8192 GPUs
(repro/benchmarks/scale.py)."""
import json

import click


@click.command("scale")
@click.option("--out", type=click.Path(dir_okay=False), default=None, help="Also write the points as JSON.")
@click.option("--max-gpus", type=click.IntRange(min=1), default=None,
              help="Largest cluster to run, of 32, 128, 512, 1024, 4096 and 8192 (default: up to 1024; 4096 and 8192 "
                   "take hours).")
def bench_scale(out, max_gpus):
    """The simulator's CPU seconds per 1,000 requests and peak memory from 32 to 8192 GPUs (trace 0, Infinite-LLM
    and vLLM-M at 0.5x and 1.5x of saturation, the same requests per GPU), and the gManager's round at those sizes.

    The round: CPU time of heartbeat intake, Algorithm 1 and DGFM, and heartbeat bytes per second."""
    from reference_impl.atomic import check_writable_file, write_text_atomic
    from repro.benchmarks.scale import bench, gmanager_table, table
    from repro.progress import progress_log

    if out:
        check_writable_file(out, "--out")  # before minutes of runs
    with progress_log("bench scale", echo=click.echo) as log:
        result = bench(log) if max_gpus is None else bench(log, max_gpus=max_gpus)
    click.echo(table(result))
    click.echo(gmanager_table(result))
    if out:
        write_text_atomic(out, json.dumps(result, indent=1) + "\n")
        click.echo(f"wrote {out}")
