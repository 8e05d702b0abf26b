"""The committed reference of reproduced numbers (repro/data/regression_reference.json): bless writes it, check
compares a fresh simulation with it and says which numbers moved, by how much, which figures they feed and how
to re-bless. The file has one number a line and sorted keys, so its diff is what a reviewer reads."""
import json
import math
from dataclasses import dataclass
from pathlib import Path

import jsonschema

from reference_impl.atomic import write_text_atomic
from reference_impl.errors import InputError
from repro.regression.cases import BY_NAME, CASES, Numbers, RegressionCase
from repro.results import load_schema

REFERENCE_PATH = Path(__file__).resolve().parents[1] / "data" / "regression_reference.json"
FORMAT = "infinite-llm-repro/regression/1"
BLESS_COMMAND = "make bless"  # = repro regression bless
REL_TOL = 1e-9  # float noise: the simulation is deterministic, so the same code gives the same bits
ABS_TOL = 1e-12
MAX_LINES_PER_CASE = 12


@dataclass(frozen=True, slots=True)
class Moved:
    case: str
    key: str
    reference: float | None  # None: absent from the reference or no value (e.g. a context that does not fit)
    current: float | None
    is_new: bool = False
    is_gone: bool = False

    def describe(self) -> str:
        if self.is_new:
            return f"{self.key}: new number {self.current!r} (not in the reference)"
        if self.is_gone:
            return f"{self.key}: gone (the reference has {self.reference!r})"
        if self.reference is None or self.current is None:
            return f"{self.key}: {self.reference!r} -> {self.current!r}"
        change = f" ({(self.current - self.reference) / abs(self.reference):+.2%})" if self.reference else ""
        return f"{self.key}: {self.reference:.6g} -> {self.current:.6g}{change}"


def load_reference(path: Path = REFERENCE_PATH) -> dict:
    if not path.is_file():
        raise InputError(f"no regression reference at {path}; make one with `{BLESS_COMMAND}`")
    doc = json.loads(path.read_text())
    error = jsonschema.exceptions.best_match(
        jsonschema.Draft202012Validator(load_schema("regression_reference.schema.json")).iter_errors(doc))
    if error is not None:
        raise InputError(f"{path} fails its schema at {'/'.join(map(str, error.absolute_path)) or '(top)'}: "
                         f"{error.message}; re-bless with `{BLESS_COMMAND}`")
    return doc


def case_entry(case: RegressionCase, numbers: Numbers) -> dict:
    return {"command": case.command, "feeds": case.feeds, "numbers": dict(sorted(numbers.items()))}


def bless(results: dict[str, Numbers], path: Path = REFERENCE_PATH) -> Path:
    """Write the reference from `results` (case name -> numbers); cases not given keep their entry."""
    cases = load_reference(path)["cases"] if path.is_file() else {}
    cases.update({name: case_entry(BY_NAME[name], numbers) for name, numbers in results.items()})
    doc = {"format": FORMAT, "rel_tol": REL_TOL, "bless": BLESS_COMMAND,
           "cases": {c.name: cases[c.name] for c in CASES if c.name in cases}}
    return write_text_atomic(path, json.dumps(doc, indent=1, sort_keys=False) + "\n", make_dirs=False)


def compare(case_name: str, reference: Numbers, current: Numbers, rel_tol: float = REL_TOL) -> list[Moved]:
    moved = []
    for key in sorted(set(reference) | set(current)):
        if key not in reference:
            moved.append(Moved(case_name, key, None, current[key], is_new=True))
        elif key not in current:
            moved.append(Moved(case_name, key, reference[key], None, is_gone=True))
        elif not _same(reference[key], current[key], rel_tol):
            moved.append(Moved(case_name, key, reference[key], current[key]))
    return moved


def _same(a: float | None, b: float | None, rel_tol: float) -> bool:
    if a is None or b is None:
        return a is b
    return math.isclose(a, b, rel_tol=rel_tol, abs_tol=ABS_TOL)


def check_case(case: RegressionCase, reference_doc: dict) -> tuple[list[Moved], int]:
    """Simulate `case` and compare it with its reference entry: (moved numbers, numbers compared)."""
    entry = reference_doc["cases"].get(case.name)
    if entry is None:
        raise InputError(f"the regression reference has no case {case.name!r}; re-bless with `{BLESS_COMMAND}`")
    current = case.run()
    num_compared = len(set(entry["numbers"]) | set(current))
    return compare(case.name, entry["numbers"], current, reference_doc["rel_tol"]), num_compared


def moved_message(moved: list[Moved], num_compared: int) -> str:
    """What moved, by how much, which figures it feeds, and the command that re-blesses."""
    cases = list(dict.fromkeys(m.case for m in moved))
    lines = [f"{len(moved)} of {num_compared} reproduced numbers moved beyond float noise (relative "
             f"{REL_TOL:g}) in {len(cases)} case(s):"]
    for name in cases:
        own = [m for m in moved if m.case == name]
        lines.append(f"  {name} ({BY_NAME[name].command}):")
        lines += [f"    {m.describe()}" for m in own[:MAX_LINES_PER_CASE]]
        if len(own) > MAX_LINES_PER_CASE:
            lines.append(f"    ... and {len(own) - MAX_LINES_PER_CASE} more")
    lines.append("They feed: " + "; ".join(BY_NAME[name].feeds for name in cases) + ".")
    targets = "make " + " ".join(BY_NAME[name].make_target for name in cases)
    lines.append(f"If the change is intended: re-bless with `{BLESS_COMMAND}` (review the diff of "
                 f"{REFERENCE_PATH.relative_to(REFERENCE_PATH.parents[2])}), then refresh the committed results "
                 f"with {targets}.")
    return "\n".join(lines)
