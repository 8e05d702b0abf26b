"""Shared plotting helpers: pick the run to draw, and save a figure as PNG and PDF atomically."""
import os
import tempfile
from pathlib import Path

import matplotlib

from reference_impl.atomic import umask_file_mode

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import seaborn as sns  # noqa: E402


def main_result(results: list[dict]) -> dict:
    """The run a figure shows: the last full (non-quick) run with default params, else the last full, else the last."""
    full = [r for r in results if not r["params"]["quick"]]
    default = [r for r in full if not r["params"].get("overrides")]
    return (default or full or results)[-1]


def new_figure(ncols: int = 1, width_in: float = 5.0, height_in: float = 3.6):
    sns.set_theme(style="whitegrid", context="paper")
    fig, axes = plt.subplots(1, ncols, figsize=(width_in * ncols, height_in), squeeze=False)
    return fig, list(axes[0])


def save(fig, figures_dir: str, name: str, *, close: bool = True, layout: bool = True) -> list[str]:
    """Write figures_dir/name.png and .pdf (temp file + rename each); returns the paths. `layout=False`: the caller
    laid the figure out already (e.g. leaving room for a suptitle)."""
    directory = Path(figures_dir)
    directory.mkdir(parents=True, exist_ok=True)
    if layout:
        fig.tight_layout()
    written = []
    for ext in ("png", "pdf"):
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{name}.", suffix=f".{ext}")
        os.fchmod(fd, umask_file_mode())
        os.close(fd)
        try:
            fig.savefig(tmp, format=ext, dpi=150)
            os.replace(tmp, directory / f"{name}.{ext}")
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        written.append(str(directory / f"{name}.{ext}"))
    if close:
        plt.close(fig)
    return written
