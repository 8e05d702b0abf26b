from pathlib import Path

import click


@click.command()
@click.option("--profiles", type=click.Path(path_type=Path), required=True,
              help="Profiles folder laid out like data/profiles (vidur/compute, vidur/network, distserve).")
@click.option("--out", type=click.Path(path_type=Path), required=True,
              help="Coefficient JSON to write (the committed one is "
                   "reference_impl/calibration/data/vidur_distserve.json).")
def calibrate(profiles, out):
    """Fit the cost model's coefficients to real A100/H100 profiles and print the fit error per curve."""
    from reference_impl.calibration.coefficients import check_out_path, dumps, validate, write_atomic
    from reference_impl.calibration.fit import calibrate as fit_profiles
    from reference_impl.calibration.report import format_table
    from repro.progress import progress_log

    check_out_path(out)
    with progress_log("calibrate"):  # elapsed time while it fits
        doc = validate(fit_profiles(profiles), "the fitted document")
    write_atomic(out, dumps(doc))
    click.echo(format_table(doc))
    click.echo(f"wrote {out}")
