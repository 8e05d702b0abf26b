"""`repro bench scale`: CPU seconds per 1,000 requests and peak memory of the simulator from 32 to 8192 GPUs
(repro/benchmarks/scale.py)."""
import json

import click


@click.command("scale")
@click.option("--out", type=click.Path(dir_okay=False), default=None, help="Also write the points as JSON.")
@click.option("--max-gpus", type=click.IntRange(min=1), default=None,
              help="Largest cluster to run, of 32, 128, 512, 1024, 4096 and 8192 (default: up to 1024; 4096 and 8192 "
                   "take hours).")
@click.option("--goals", is_flag=True,
              help="Run the goal points instead (1024 GPUs with 100,000 requests; 8192 with 1,000,000, up to "
                   "--max-gpus): Infinite-LLM at 2 requests/s per GPU, CPU s and peak memory against each goal.")
@click.option("--latency", "latency_from", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Run the round-latency check instead: Infinite-LLM past saturation with the gManager's decisions "
                   "at once, after the round measured at that size, and after the largest round, taking the rounds "
                   "from this `repro bench scale` record (e.g. results/bench/scale.json).")
def bench_scale(out, max_gpus, goals, latency_from):
    """The simulator's CPU seconds per 1,000 requests and peak memory from 32 to 8192 GPUs (trace 0, Infinite-LLM
    and vLLM-M at 0.5x and 1.5x of saturation, the same requests per GPU), and the gManager's round at those sizes.

    The round: CPU time of heartbeat intake, Algorithm 1 and DGFM, and heartbeat bytes per second."""
    from reference_impl.atomic import check_writable_file, write_text_atomic
    from repro.benchmarks.scale import bench, bench_goals, gmanager_table, goals_table, table
    from repro.progress import progress_log

    if out:
        check_writable_file(out, "--out")  # before minutes of runs
    if latency_from:
        from repro.benchmarks.scale_latency import SIZES, latency_check, latency_table
        scale = json.loads(open(latency_from).read())
        sizes = [g for g in SIZES if max_gpus is None or g <= max_gpus]
        with progress_log("bench scale --latency", echo=click.echo) as log:
            result = latency_check(log, scale, sizes)
        click.echo(latency_table(result))
        if out:
            write_text_atomic(out, json.dumps(result, indent=1) + "\n")
            click.echo(f"wrote {out}")
        return
    if goals:
        with progress_log("bench scale --goals", echo=click.echo) as log:
            result = bench_goals(log) if max_gpus is None else bench_goals(log, max_gpus=max_gpus)
        click.echo(goals_table(result))
        if out:
            write_text_atomic(out, json.dumps(result, indent=1) + "\n")
            click.echo(f"wrote {out}")
        return
    with progress_log("bench scale", echo=click.echo) as log:
        result = bench(log) if max_gpus is None else bench(log, max_gpus=max_gpus)
    click.echo(table(result))
    click.echo(gmanager_table(result))
    if out:
        write_text_atomic(out, json.dumps(result, indent=1) + "\n")
        click.echo(f"wrote {out}")
