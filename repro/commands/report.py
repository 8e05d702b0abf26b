import json

import click


@click.command()
@click.option("--results-dir", type=click.Path(file_okay=False), default="results", show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the rows as JSON.")
def report(results_dir, as_json):
    """Each headline claim of the papers beside the reproduced number and whether it falls in the paper's range."""
    from repro.report import build_report, format_report

    rows = build_report(results_dir)
    if as_json:
        click.echo(json.dumps(rows, indent=2))
    else:
        click.echo(format_report(rows))
