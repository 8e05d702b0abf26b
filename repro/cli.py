import sys

import click

from reference_impl.errors import InputError
from repro.lazy_group import LazyGroup

COMMANDS = {
    "attention": "repro.commands.attention:attention",
    "bench": "repro.commands.bench:bench",
    "calibrate": "repro.commands.calibrate:calibrate",
    "compare-vllm": "baselines.vllm_cli:compare_vllm",
    "generate": "repro.commands.generate:generate",
    "plot": "repro.commands.plot:plot",
    "profile": "repro.commands.profile:profile",
    "report": "repro.commands.report:report",
    "run": "repro.commands.run:run",
    "simulate": "repro.commands.simulate:simulate",
    "workloads": "repro.commands.workloads:workloads",
}


@click.group(cls=LazyGroup, lazy=COMMANDS, context_settings={"help_option_names": ["-h", "--help"]})
def cli():
    """Infinite-LLM reference engine and reproduction harness."""


def main(argv=None):
    """Console entry point: user mistakes become one line on stderr and exit status 2."""
    try:
        cli.main(args=argv, prog_name="repro", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except InputError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
