"""The control plane, the cost model, the simulator and the systems import no torch: each module is imported in a
process where torch cannot be imported at all."""
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TORCH_FREE = ("reference_impl.control", "reference_impl.calibration", "reference_impl.sim", "reference_impl.systems",
              "reference_impl.serving")
CODE = """
import importlib, pkgutil, sys
sys.modules["torch"] = None  # `import torch` now raises ImportError
for name in {packages!r}:
    package = importlib.import_module(name)
    for module in pkgutil.walk_packages(package.__path__, name + "."):
        importlib.import_module(module.name)
print(sorted(m for m in sys.modules if m.startswith("reference_impl.")))
"""


@pytest.mark.parametrize("package", TORCH_FREE)
def test_imports_without_torch(package):
    proc = subprocess.run([sys.executable, "-c", CODE.format(packages=(package,))], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr.strip().splitlines()[-1]
    assert f"'{package}." in proc.stdout  # its modules were imported, not skipped


def test_a_module_that_needs_torch_is_caught():
    proc = subprocess.run([sys.executable, "-c", CODE.format(packages=("reference_impl.profiling",))], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "torch" in proc.stderr


def test_the_model_shape_is_torch_free():
    """The engine's ModelConfig is the cost model's model description too: it must import where torch cannot."""
    code = 'import sys; sys.modules["torch"] = None; import reference_impl.model.config'
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
