"""`repro bench scale`: CPU seconds per 1,000 requests and peak memory of the simulator from 32 to 8192 GPUs
(repro/benchmarks/scale.py)."""
import json
from pathlib import Path

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
    from reference_impl.atomic import check_writable_file
    from repro.benchmarks.scale import bench, bench_goals, gmanager_table, goals_table, table
    from repro.progress import progress_log

    if out:
        check_writable_file(out, "--out")  # before minutes of runs
    limit = {} if max_gpus is None else {"max_gpus": max_gpus}
    if latency_from:
        from repro.benchmarks.scale_latency import SIZES, latency_check, latency_table
        scale = _scale_record(latency_from)
        with progress_log("bench scale --latency", echo=click.echo) as log:
            result = latency_check(log, scale, [g for g in SIZES if max_gpus is None or g <= max_gpus])
        _report(result, [latency_table(result)], out)
    elif goals:
        with progress_log("bench scale --goals", echo=click.echo) as log:
            result = bench_goals(log, **limit)
        _report(result, [goals_table(result)], out)
    else:
        with progress_log("bench scale", echo=click.echo) as log:
            result = bench(log, **limit)
        _report(result, [table(result), gmanager_table(result)], out)


def _scale_record(path: str) -> dict:
    """A `repro bench scale` record, or one line saying what is wrong with it."""
    try:
        record = json.loads(Path(path).read_text())
        if record["gmanager_rounds"]:
            return record
    except (OSError, ValueError, KeyError, TypeError):
        pass
    raise click.BadParameter(f"{path} is not a `repro bench scale` record with gManager rounds "
                             "(e.g. results/bench/scale.json)", param_hint="--latency")


def _report(result: dict, tables: list[str], out: str | None) -> None:
    from reference_impl.atomic import write_text_atomic

    for text in tables:
        click.echo(text)
    if out:
        write_text_atomic(out, json.dumps(result, indent=1) + "\n")
        click.echo(f"wrote {out}")
