"""The seam between the simulator, the designs and the real backends (docs DESIGN: one cluster config, a design
handed to whichever backend runs it): nothing in sim/ imports a design or the catalog, and no real backend imports the
simulator. Read from the source's import statements (those under `if TYPE_CHECKING:` too), so a lazy import inside a
function counts as well."""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "reference_impl"


def imported_modules(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


@pytest.mark.parametrize("package, forbidden", [("sim", "reference_impl.systems"),
                                                ("backends", "reference_impl.sim")])
def test_no_import_across_the_seam(package, forbidden):
    offenders = {str(p.relative_to(ROOT)): sorted(m for m in imported_modules(p) if m.startswith(forbidden))
                 for p in (ROOT / package).rglob("*.py")}
    assert not {p: m for p, m in offenders.items() if m}


def test_the_check_sees_an_import():
    """The reader finds a lazy import inside a function (so an empty result above means none)."""
    assert "reference_impl.systems.catalog" in imported_modules(ROOT / "systems" / "run.py")
