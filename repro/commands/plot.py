import click

from repro.framework.registry import EXPERIMENTS, get_experiment


@click.command()
@click.option("--experiment", "names", multiple=True, type=click.Choice(sorted(EXPERIMENTS)),
              help="Experiments to plot (default: every one with results).")
@click.option("--results-dir", type=click.Path(exists=True, file_okay=False), default="results", show_default=True)
@click.option("--figures-dir", type=click.Path(file_okay=False), default="figures", show_default=True)
def plot(names, results_dir, figures_dir):
    """Draw figures (PNG and PDF) from saved results only."""
    from reference_impl.atomic import check_writable_dir
    from repro.results import load_results

    check_writable_dir(figures_dir, "--figures-dir")
    drawn = 0
    for name in names or sorted(EXPERIMENTS):
        exp = get_experiment(name)
        results = load_results(results_dir, exp)
        if exp.plot is None or not results:
            if names:
                click.echo(f"{name}: no results under {results_dir}/{name}; run `repro run --experiment {name}`")
            continue
        for path in exp.plot(results, figures_dir):
            click.echo(f"wrote {path}")
            drawn += 1
    if not drawn:
        raise click.ClickException(f"nothing to plot: no results under {results_dir}")
