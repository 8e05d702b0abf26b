from pathlib import Path

import click

from reference_impl.errors import InputError
from repro.options import seed_option

DTYPES = ("float32", "float16", "bfloat16")


@click.command()
@click.option("--out", type=click.Path(path_type=Path), required=True, help="Coefficient JSON to write.")
@click.option("--model", default=None, help="Model whose layer is measured (default: llama-tiny on CPU, "
                                            "llama2-7b on a GPU).")
@click.option("--name", default=None, help="Hardware name in the file (default: 'cpu' or the GPU's name).")
@click.option("--device", default=None, help="torch device (default: cuda if there is one, else cpu).")
@click.option("--dtype", type=click.Choice(DTYPES), default=None,
              help="Default: float32 on CPU, float16 on a GPU.")
@click.option("--threads", type=click.IntRange(min=1), default=None,
              help="torch CPU threads (default: 1 on CPU, where instances of the local backend share the cores "
                   "and threads fighting for a busy core make timings erratic; torch's default on a GPU).")
@click.option("--quick", is_flag=True, help="A few points only (seconds; for tests).")
@seed_option
def profile(out, model, name, device, dtype, threads, quick, seed):
    """Measure the cost model's inputs on this machine and write them in the calibration format."""
    import torch

    from reference_impl.calibration.coefficients import check_out_path, dumps, validate, write_atomic
    from reference_impl.profiling.local import profile as measure
    from reference_impl.calibration.report import format_table
    from reference_impl.calibration.specs import model_spec
    from repro.progress import progress_log

    check_out_path(out)
    try:
        dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        torch.empty(1, device=dev)
    except (RuntimeError, AssertionError) as exc:
        raise InputError(f"cannot use device {device!r}: {str(exc).splitlines()[0]}") from None
    on_gpu = dev.type == "cuda"
    if threads or not on_gpu:
        torch.set_num_threads(threads or 1)
    spec = model_spec(model or ("llama2-7b" if on_gpu else "llama-tiny"))
    name = name or (torch.cuda.get_device_name(dev) if on_gpu else "cpu")
    torch_dtype = getattr(torch, dtype or ("float16" if on_gpu else "float32"))
    with progress_log("profile"):  # elapsed time while it measures
        doc = validate(measure(spec, name=name, device=dev, dtype=torch_dtype, quick=quick, seed=seed),
                       "the measured document")
    write_atomic(out, dumps(doc))
    click.echo(format_table(doc))
    click.echo(f"wrote {out}")
