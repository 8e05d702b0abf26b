import click

from repro.options import seed_option

SWEEP_KEYS = ("workers", "store", "graph", "ahead")  # the sweep's own keys (repro/serving/sweep.py SWEEP_PARAMS)


def split_params(pairs: tuple[str, ...]) -> tuple[dict, dict]:
    """`--param` pairs as (the sweep's keys, experiment -> its keys): `workers=2`, `e2e.seeds=5`."""
    from repro.commands.run import parse_params
    from repro.framework.figure_set import FIGURE_SET

    names = {name for name, _ in FIGURE_SET}
    sweep, each = {}, {}
    for key, value in parse_params(pairs).items():
        if key in SWEEP_KEYS:
            sweep[key] = value
            continue
        name, dot, inner = key.partition(".")
        if not dot or name not in names or not inner:
            raise click.BadParameter(f"{key!r}: give {', '.join(SWEEP_KEYS)} or EXPERIMENT.KEY with EXPERIMENT one "
                                     f"of {', '.join(sorted(names))}", param_hint="--param")
        each.setdefault(name, {})[inner] = value
    return sweep, each


@click.command()
@click.option("--quick", is_flag=True, help="The small version of every experiment.")
@seed_option
@click.option("--address", default=None, help="Ray cluster (HOST:PORT, auto, local) for every simulated point, as "
                                              "repro run --address; default $RAY_ADDRESS, else a local pool.")
@click.option("--param", "params", multiple=True, metavar="KEY=VALUE",
              help="workers=N, store=DIR|off (default RESULTS_DIR/.points), graph=FILE, ahead=N for the one sweep; "
                   "EXPERIMENT.KEY=VALUE for one experiment (e2e.seeds=5).")
@click.option("--results-dir", type=click.Path(), default="results", show_default=True)
@click.option("--figures-dir", type=click.Path(file_okay=False), default="figures", show_default=True)
@click.option("--force", is_flag=True, help="Run the simulated and arithmetic experiments again (stored points are "
                                            "read, not rerun).")
@click.option("--remeasure", is_flag=True, help="Run the measurements on this machine (--backend local) again.")
@click.option("--replot", is_flag=True, help="Draw every figure again, even from the results it was drawn from.")
def figures(quick, seed, address, params, results_dir, figures_dir, force, remeasure, replot):
    """The figure set at once: its simulated points on one sweep, every figure, and the report."""
    from reference_impl.atomic import check_writable_dir
    from repro.commands.run import with_store_under
    from repro.exit_codes import exit_on_failed_requests
    from repro.framework.figure_set import FIGURE_SET, SetOptions, plot_set, run_set
    from repro.progress import progress_log
    from repro.report import build_report, format_report

    sweep, each = split_params(params)
    sweep = with_store_under(sweep, results_dir)
    check_writable_dir(figures_dir, "--figures-dir")
    options = SetOptions(quick=quick, seed=seed, address=address, sweep=sweep, each=each, results_dir=results_dir,
                         force=force, remeasure=remeasure)
    with exit_on_failed_requests(), progress_log("figures", echo=click.echo) as log:
        for path in run_set(FIGURE_SET, options, log):
            log(f"wrote {path}")
        for path in plot_set(FIGURE_SET, results_dir, figures_dir, log, replot=replot):
            log(f"wrote {path}")
    click.echo(format_report(build_report(results_dir)))
