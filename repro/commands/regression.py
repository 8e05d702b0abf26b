"""`repro regression`: the reproduced-numbers guard (check, bless) and the speed baseline (bless-speed)."""
import sys

import click

from reference_impl.errors import InputError


def _cases(names):
    from repro.regression.cases import BY_NAME, CASES

    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        raise InputError(f"unknown regression case {unknown[0]!r}; choose from {', '.join(BY_NAME)}")
    return [BY_NAME[n] for n in names] if names else list(CASES)


@click.group()
def regression():
    """CI's regression guards: check or re-bless the reproduced numbers, re-bless the speed baseline.

    docs/regression.md says what they guard."""


@regression.command()
@click.option("--case", "names", multiple=True, help="Only this case (repeatable; default all).")
def check(names):
    """Re-simulate the fixed quick configurations and compare every number with the committed reference;
    exit 1 and list what moved when any number moved beyond float noise."""
    from repro.progress import progress
    from repro.regression.reference import check_case, load_reference, moved_message

    doc = load_reference()
    moved, num_compared = [], 0
    for case in progress(_cases(names), desc="regression check", unit="case"):
        own, n = check_case(case, doc)
        moved += own
        num_compared += n
        click.echo(f"{case.name:<18} {n:4d} numbers, {len(own):4d} moved")
    if moved:
        click.echo(moved_message(moved, num_compared))
        sys.exit(1)
    click.echo(f"all {num_compared} reproduced numbers equal to the reference")


@regression.command()
@click.option("--case", "names", multiple=True, help="Only this case (repeatable; default all).")
def bless(names):
    """Re-simulate the fixed quick configurations and write their numbers as the new reference
    (repro/data/regression_reference.json; commit its diff with the change that moved them)."""
    from repro.progress import progress
    from repro.regression.reference import bless as write_reference

    results = {}
    for case in progress(_cases(names), desc="regression bless", unit="case"):
        results[case.name] = case.run()
        click.echo(f"{case.name:<18} {len(results[case.name]):4d} numbers")
    click.echo(f"wrote {write_reference(results)}")


@regression.command("bless-speed")
@click.option("--size", type=click.Choice(("ci", "large")), default="ci", show_default=True,
              help="ci: the sizes `make test` measures; large: `make bench`'s.")
@click.option("--case", "names", multiple=True, help="Only this speed case (repeatable; default all).")
@click.option("--repeats", default=3, show_default=True, type=click.IntRange(min=1),
              help="Measure each case this many times and keep the run of median ratio.")
def bless_speed(size, names, repeats):
    """Measure each speed case's ratio to its reference on this machine and write it as the new baseline
    (repro/data/speed_baseline.json)."""
    from repro.progress import progress
    from repro.regression.speed import bless as write_baseline, measure
    from repro.regression.speed_workloads import BY_NAME, CASES

    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        raise InputError(f"unknown speed case {unknown[0]!r}; choose from {', '.join(BY_NAME)}")
    results = []
    for case in progress([BY_NAME[n] for n in names] or list(CASES), desc="bless speed", unit="case"):
        runs = sorted((measure(case, size) for _ in range(repeats)), key=lambda r: r.ratio)
        kept = runs[len(runs) // 2]
        results.append(kept)
        click.echo(f"{case.name:<20} ratio {kept.ratio:8.3g}  (runs {', '.join(f'{r.ratio:.3g}' for r in runs)}; "
                   f"{kept.subject_per_s:.4g} {kept.unit}/s vs {kept.reference_per_s:.4g})")
    click.echo(f"wrote {write_baseline(results)}")


@regression.command("hash")
@click.option("--case", "names", multiple=True, help="Only this case (repeatable; default all).")
@click.option("--e2e-result", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Also hash this result.json's points without wall_s (e.g. of `repro run --experiment e2e --quick`).")
def hash_runs(names, e2e_result):
    """Print a hash of each fixed simulated run (every design, chunked prefill, 32 GPUs): equal before and after a
    change means that change moved no simulated number of them."""
    from repro.regression.hashes import CASES, e2e_points_hash, run_case

    by_name = {c.name: c for c in CASES}
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise InputError(f"unknown hash case {unknown[0]!r}; choose from {', '.join(by_name)}")
    for case in [by_name[n] for n in names] or CASES:
        click.echo(f"{case.name:<18} {run_case(case)[:16]}")
    if e2e_result is not None:
        click.echo(f"{'e2e points':<18} {e2e_points_hash(e2e_result)[:16]}")
