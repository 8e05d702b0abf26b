import sys

import click

from reference_impl.errors import InputError
from repro.lazy_group import LazyGroup

# name -> ("module:attribute", short help): `repro --help` lists them without importing any
COMMANDS = {
    "attention": ("repro.attention.cli:attention", "DistAttention kernels: equivalence checks."),
    "bench": ("repro.commands.bench:bench", "Micro-benchmarks measured on the machine at hand."),
    "calibrate": ("repro.commands.calibrate:calibrate",
                  "Fit the cost model's coefficients to real A100/H100 profiles and print the fit error per curve."),
    "compare-vllm": ("baselines.real_vllm.cli:compare_vllm",
                     "Greedy tokens and throughput of our engine and of real vLLM, same folder, same requests, one run."),
    "figures": ("repro.commands.figures:figures",
                "The figure set at once: its simulated points on one sweep, every figure, and the report."),
    "generate": ("repro.commands.generate:generate",
                 "Generation on the engine: the tokens (and text), where each request's rBlocks ended up, wall time "
                 "and tok/s."),
    "plot": ("repro.commands.plot:plot", "Draw figures (PNG and PDF) from saved results only."),
    "profile": ("repro.commands.profile:profile",
                "Measure the cost model's inputs on this machine and write them in the calibration format."),
    "regression": ("repro.commands.regression:regression",
                   "CI's regression guards: check or re-bless the reproduced numbers, re-bless the speed baseline."),
    "report": ("repro.commands.report:report",
               "Each headline claim of the papers beside the reproduced number and whether it falls in the paper's range."),
    "run": ("repro.commands.run:run",
            "Run an experiment and write results/<experiment>/<run-id>/result.json."),
    "serve": ("repro.commands.serve:serve",
              "An OpenAI-compatible server over the engine (completions, chat, streaming, metrics)."),
    "simulate": ("repro.commands.simulate:simulate",
                 "Serve a workload file on the simulated cluster and print what the design chose and how it served."),
    "validate-gpu": ("repro.commands.validate_gpu:validate_gpu",
                     "The engine and the cost model checked on one GPU in one command (--dry-run: on the CPU)."),
    "workloads": ("repro.commands.workloads:workloads",
                  "The nine traces (infinite-llm Table 1) and eighteen datasets (distkv-llm Table 2)."),
}


@click.group(cls=LazyGroup, lazy=COMMANDS, context_settings={"help_option_names": ["-h", "--help"]})
def cli():
    """Infinite-LLM reference engine and reproduction harness."""


def main(argv=None):
    """Console entry point: user mistakes become one line on stderr and a non-zero exit status (2)."""
    try:
        cli.main(args=argv, prog_name="repro", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.UsageError as exc:
        where = exc.ctx.command_path if exc.ctx else "repro"
        message = " ".join(exc.format_message().split())
        click.echo(f"error: {message} (see `{where} --help`)", err=True)
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        click.echo(f"error: {' '.join(exc.format_message().split())}", err=True)
        sys.exit(exc.exit_code)
    except InputError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    except OSError as exc:  # the machine refused (disk full, permissions, a folder where a file should be)
        target = exc.filename2 or exc.filename  # a rename names its destination second
        where = f": {target}" if target else ""
        click.echo(f"error: {exc.strerror or exc}{where}", err=True)
        sys.exit(1)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
