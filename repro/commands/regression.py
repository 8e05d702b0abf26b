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
@click.option("--case", "names", multiple=True, help="Only this hash case (repeatable; default all).")
@click.option("--check", is_flag=True, help="Exit 1 when a hash differs from the committed one.")
@click.option("--write", is_flag=True, help="Write the hashes as the committed ones (repro/data/run_hashes.json).")
def hash_(names, check, write):
    """Hash simulated runs bit for bit: the quick e2e points without wall_s, every design on 8 GPUs, Infinite-LLM
    and vLLM-M on 128; a change meant not to move any simulated number keeps every hash."""
    from repro.progress import progress
    from repro.regression.hashes import BY_NAME, CASES, load_hashes, write_hashes

    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        raise InputError(f"unknown hash case {unknown[0]!r}; choose from {', '.join(BY_NAME)}")
    committed, hashes, differ = load_hashes(), {}, []
    for case in progress([BY_NAME[n] for n in names] or list(CASES), desc="hash", unit="case"):
        hashes[case.name] = case.compute()
        same = committed.get(case.name) == hashes[case.name]
        differ += [] if same else [case.name]
        click.echo(f"{case.name:<32} {hashes[case.name][:16]}  {'same' if same else 'DIFFERS'}")
    if write:
        click.echo(f"wrote {write_hashes({**committed, **hashes})}")
    elif check and differ:
        click.echo(f"{len(differ)} of {len(hashes)} hashes differ from repro/data/run_hashes.json")
        sys.exit(1)
