import json
from pathlib import Path

import click

from reference_impl.errors import InputError


@click.command()
@click.option("--results-dir", type=click.Path(exists=True, file_okay=False), default="results", show_default=True,
              help="Folder of saved results (repro run --results-dir).")
@click.option("--json", "as_json", is_flag=True, help="Print the rows as JSON.")
def report(results_dir, as_json):
    """Each headline claim of the papers beside the reproduced number and whether it falls in the paper's range."""
    from repro.report import build_report, format_report

    if not any(Path(results_dir).glob("*/*/result.json")):
        raise InputError(f"no results under {results_dir}; run `repro run --experiment NAME` first "
                         "or give the folder that holds them with --results-dir")
    rows = build_report(results_dir)
    if as_json:
        click.echo(json.dumps(rows, indent=2))
    else:
        click.echo(format_report(rows))
