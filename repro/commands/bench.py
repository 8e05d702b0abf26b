import click

from repro.lazy_group import LazyGroup

BENCHMARKS = {
    "attention": "repro.commands.bench_attention:bench_attention",
    "engine": "repro.commands.bench_engine:bench_engine",
    "ray": "repro.commands.bench_ray:bench_ray",
}


@click.group(cls=LazyGroup, lazy=BENCHMARKS)
def bench():
    """Micro-benchmarks measured on the machine at hand."""
