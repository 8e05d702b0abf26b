import click

from repro.experiments.registry import EXPERIMENTS

BACKENDS = ("sim", "local", "ray", "vllm")


def parse_params(pairs: tuple[str, ...]) -> dict:
    extra = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"expected key=value, got {pair!r}", param_hint="--param")
        extra[key] = value
    return extra


@click.command()
@click.option("--experiment", "name", required=True, type=click.Choice(sorted(EXPERIMENTS)),
              help="Which experiment to run.")
@click.option("--backend", type=click.Choice(BACKENDS), default="sim", show_default=True)
@click.option("--quick", is_flag=True, help="A small version of the experiment (seconds, for tests).")
@click.option("--seed", default=0, show_default=True, type=int)
@click.option("--address", default=None, help="Ray cluster address (with --backend ray); 'local' starts one.")
@click.option("--param", "params", multiple=True, metavar="KEY=VALUE", help="Experiment-specific option.")
@click.option("--run-id", default=None, help="Name of this run (default: from backend, size and seed).")
@click.option("--results-dir", type=click.Path(file_okay=False), default="results", show_default=True)
@click.option("--force", is_flag=True, help="Run again even if the result exists.")
def run(name, backend, quick, seed, address, params, run_id, results_dir, force):
    """Run an experiment and write results/<experiment>/<run-id>/result.json."""
    from repro.experiments.base import RunParams
    from repro.experiments.registry import get_experiment
    from repro.results import run_and_save

    exp = get_experiment(name)
    run_params = RunParams(quick=quick, backend=backend, seed=seed, address=address, extra=parse_params(params))
    path, ran = run_and_save(exp, run_params, results_dir, force=force, run_id=run_id, log=click.echo)
    if ran:
        click.echo(f"wrote {path}")
