from pathlib import Path

import click

from reference_impl.errors import InputError
from repro.validate_gpu.sizes import DRY, GPU, PARTS


@click.command("validate-gpu")
@click.option("--out", type=click.Path(path_type=Path), required=True,
              help="Folder for result.json, summary.md, figure.png and each part's log (created; must be empty).")
@click.option("--dry-run", is_flag=True, help="The same parts on the CPU at toy sizes (what `make test` runs).")
@click.option("--part", "parts", type=click.Choice(PARTS), multiple=True, help="Run only these parts (default: all).")
@click.option("--device", default="cuda", show_default=True, help="torch device of a GPU run.")
def validate_gpu(out, dry_run, parts, device):
    """The engine and the cost model checked on one GPU in one command (--dry-run: on the CPU).

    Kernel exactness and bandwidth, tokens against transformers, real step times against the cost model,
    pooling on one GPU, and sim-vs-real serving; each part in its own process under its own time budget
    (at most 8 minutes in all)."""
    from repro.validate_gpu.runner import missing_packages, run_all

    missing = missing_packages()
    if missing:
        raise InputError(f"validate-gpu needs {', '.join(missing)}: pip install {' '.join(missing)}")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise InputError(f"--out {out} exists and is not an empty folder: name a new one")
    import torch  # after the check above: a machine without torch gets the pip line, not a traceback

    if dry_run:
        device = "cpu"
    elif not device.startswith("cuda") or not torch.cuda.is_available():
        raise InputError(f"no CUDA device here (torch {torch.__version__}, --device {device}): run on a GPU machine "
                         "with CUDA torch, or pass --dry-run for the CPU rehearsal")
    doc = run_all(out, DRY if dry_run else GPU, device, parts or PARTS, echo=lambda line: click.echo(line, err=True))
    click.echo((out / "summary.md").read_text(), nl=False)
    if not doc["passed"]:
        raise click.exceptions.Exit(1)
