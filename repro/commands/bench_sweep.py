"""`repro bench sweep`: per-point overhead of Ray against the local pool, points per second with 1 and 2 workers,
and the quick figure set's task graph scheduled on 16, 64 and 256 cores (repro/benchmarks/sweep.py)."""
import json

import click


@click.command("sweep")
@click.option("--out", type=click.Path(dir_okay=False), default=None,
              help="Also write the measurements, the prediction and the graph as JSON.")
def bench_sweep(out):
    """Per-point overhead of simulated points on Ray against the local pool (1 and 2 workers), and the quick figure
    set's task graph scheduled on 16, 64 and 256 cores."""
    from reference_impl.atomic import check_writable_file, write_text_atomic
    from repro.benchmarks.sweep import bench
    from repro.progress import progress_log

    if out:
        check_writable_file(out, "--out")  # before minutes of runs
    with progress_log("bench sweep", echo=click.echo) as log:
        result = bench(log)
    if out:
        write_text_atomic(out, json.dumps(result, indent=1) + "\n")
        click.echo(f"wrote {out}")
