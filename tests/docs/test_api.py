"""The public API of reference_impl: every committed name is still exported and resolves, and importing the
package stays cheap (no torch, Ray or numpy until a name that needs them is used)."""
import subprocess
import sys
from pathlib import Path

import pytest

import reference_impl

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = (Path(__file__).parent / "public_api.txt").read_text().split()


def test_no_committed_public_name_disappears():
    missing = sorted(set(COMMITTED) - set(reference_impl.__all__))
    assert not missing, f"public names removed from reference_impl.__all__: {missing} (docs/api.md)"


@pytest.mark.parametrize("name", [n for n in COMMITTED if n != "generate_ray"])
def test_each_public_name_resolves(name):
    value = getattr(reference_impl, name)
    assert value is not None
    if callable(value) and hasattr(value, "__module__"):
        assert value.__module__.split(".")[0] in ("reference_impl", "workloads")


def test_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        reference_impl.nope  # noqa: B018


def test_import_loads_no_heavy_library():
    code = ("import sys, reference_impl; heavy = [m for m in ('torch', 'ray', 'numpy', 'triton') if m in sys.modules];"
            "print(','.join(heavy))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT,
                         env={"PYTHONPATH": str(ROOT), "PATH": ""}).stdout.strip()
    assert out == "", f"import reference_impl loaded {out}"
