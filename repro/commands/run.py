import click

from repro.exit_codes import exit_on_failed_requests
from repro.framework.registry import EXPERIMENTS, get_experiment
from repro.options import seed_option

BACKENDS = ("sim", "local", "ray", "vllm")


def parse_params(pairs: tuple[str, ...]) -> dict:
    extra = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise click.BadParameter(f"expected KEY=VALUE, got {pair!r}", param_hint="--param")
        if key in extra and extra[key] != value:
            raise click.BadParameter(f"{key} given twice ({extra[key]!r} and {value!r})", param_hint="--param")
        extra[key] = value
    return extra


def _params_text(name: str) -> str:
    from repro.framework.params import describe_params

    return describe_params(get_experiment(name))


def _list_params(ctx, _param, name):
    if name is None or ctx.resilient_parsing:
        return
    click.echo(_params_text(name))
    ctx.exit()


def _remember_experiment(ctx, _param, name):
    ctx.meta["repro.experiment"] = name
    return name


class RunCommand(click.Command):
    """`repro run --experiment X --help` also lists X's --param keys."""

    def format_epilog(self, ctx, formatter):
        super().format_epilog(ctx, formatter)
        name = ctx.meta.get("repro.experiment")
        if name:
            formatter.write_paragraph()
            for line in _params_text(name).splitlines():
                formatter.write_text(line)


@click.command(cls=RunCommand,
               epilog="`repro run --list-params NAME` (or `--experiment NAME --help`) lists an experiment's --param keys.")
@click.option("--experiment", "name", type=click.Choice(sorted(EXPERIMENTS)), is_eager=True,
              callback=_remember_experiment, help="Which experiment to run.")
@click.option("--list-params", type=click.Choice(sorted(EXPERIMENTS)), is_eager=True, expose_value=False,
              callback=_list_params, help="Print an experiment's --param keys, types and defaults, and exit.")
@click.option("--backend", type=click.Choice(BACKENDS), default="sim", show_default=True)
@click.option("--quick", is_flag=True, help="A small version of the experiment (seconds, for tests).")
@seed_option
@click.option("--address", default=None,
              help="Ray cluster address (HOST:PORT, auto: $RAY_ADDRESS or the cluster started here); 'local' starts "
                   "a private one. With --backend ray the engine runs there; with --backend sim the simulated points "
                   "do, and without --address they go to $RAY_ADDRESS when it is set (docs/figures.md).")
@click.option("--param", "params", multiple=True, metavar="KEY=VALUE",
              help="Experiment-specific option (see --list-params); a non-default value is a new run.")
@click.option("--run-id", default=None, help="Name of this run (default: from backend, size, seed and non-default "
                                             "params).")
@click.option("--results-dir", type=click.Path(), default="results", show_default=True)
@click.option("--force", is_flag=True, help="Run again even if the result exists.")
@click.option("--json", "as_json", is_flag=True,
              help='Print {"result": PATH, "ran": BOOL, "rows": [...]} (the table\'s rows) instead of the table.')
def run(name, backend, quick, seed, address, params, run_id, results_dir, force, as_json):
    """Run an experiment and write results/<experiment>/<run-id>/result.json.

    Progress and the run's log go to stderr; stdout gets the result's table at the end (per group the reproduced
    ratio, the paper's range, and the seeds' spread in the note) or, with --json, the same as JSON."""
    from repro.framework.base import RunParams
    from repro.progress import progress_log
    from repro.results import run_and_save
    from repro.serving.sweep import sweeps_points

    if name is None:
        raise click.UsageError("give --experiment NAME (or --list-params NAME)")
    exp = get_experiment(name)
    if address is not None and backend != "ray" and not (backend == "sim" and sweeps_points(exp)):
        points = ", ".join(n for n in sorted(EXPERIMENTS) if sweeps_points(get_experiment(n)))
        raise click.BadParameter(f"only with --backend ray, or --backend sim for an experiment whose simulated points "
                                 f"run on a cluster ({points}); got --backend {backend} with {name}",
                                 param_hint="--address")
    extra = parse_params(params)
    if sweeps_points(exp):
        extra = with_store_under(extra, results_dir)
    run_params = RunParams(quick=quick, backend=backend, seed=seed, address=address, extra=extra)
    with exit_on_failed_requests(), progress_log(name, to_stderr=True) as log:  # Ray points: an instance died
        path, ran = run_and_save(exp, run_params, results_dir, force=force, run_id=run_id, log=log)
    echo_table(exp, path, ran, as_json)


def with_store_under(extra: dict, results_dir: str) -> dict:
    """The point store follows --results-dir (DIR/.points) unless --param store or $REPRO_POINT_STORE names one."""
    import os
    from pathlib import Path

    from repro.serving.store import DEFAULT_DIR, ENV

    if "store" in extra or os.environ.get(ENV):
        return extra
    folder = Path(results_dir) / ".points"
    return extra if folder == Path(DEFAULT_DIR) else {**extra, "store": str(folder)}


def echo_table(exp, path, ran: bool, as_json: bool) -> None:
    """The result's rows (repro/report.py run_rows) on stdout: a table, or JSON."""
    import json

    from repro.report import format_report, run_rows

    rows = run_rows(exp, json.loads(path.read_text()), path)
    if as_json:
        click.echo(json.dumps({"result": str(path), "ran": ran, "rows": rows}, default=str))
        return
    click.echo(f"{'wrote' if ran else 'already there (--force runs it again)'}: {path}")
    click.echo(format_report(rows) if rows else f"{exp.name} has no report rows; its figure: repro plot --experiment "
                                                 f"{exp.name}")
