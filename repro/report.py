"""`repro report`: one row per (headline claim, metric), from saved results only."""
import textwrap
from dataclasses import asdict

from repro.accuracy import _sim_vs_real, accuracy_rows
from repro.claims import headline_claims
from repro.experiments.designs.claims import claim_rows
from repro.experiments.designs.report import design_rows
from repro.framework.registry import EXPERIMENTS, get_experiment
from repro.results import load_results


NOT_RUN = "not run"  # the verdict of a claim whose experiment has no result
CLAIM_W, METRIC_W, NOTE_W = 24, 42, 118


def build_report(results_dir: str) -> list[dict]:
    by_claim: dict[str, list] = {}
    for name in sorted(EXPERIMENTS):
        exp = get_experiment(name)
        if exp.claims is None:
            continue
        results = load_results(results_dir, exp)
        if results:
            for row in exp.claims(results):
                by_claim.setdefault(row.claim_id, []).append(row)
    rows = []
    for claim in headline_claims():
        found = by_claim.get(claim["id"], [])
        if not found:
            rows.append({"claim_id": claim["id"], "figure": claim["figure"], "metric": claim["claim"],
                         "paper": "", "reproduced": None, "unit": "", "verdict": NOT_RUN,
                         "note": "no result of its experiment: `repro run` it (or give its --results-dir)"})
        for row in found:
            rows.append({**asdict(row), "figure": claim["figure"], "verdict": row.verdict})
    return rows + design_rows(results_dir) + accuracy_rows(results_dir)


def run_rows(exp, result: dict, path) -> list[dict]:
    """The report's rows of one result of `exp` (`path` its result.json): what `repro run` prints at its end."""
    if exp.name == "designs":
        return claim_rows(result)
    if exp.name == "sim-vs-real":
        return _sim_vs_real(path)
    if exp.claims is None:
        return []
    return [{**asdict(row), "verdict": row.verdict} for row in exp.claims([result])]


def format_report(rows: list[dict]) -> str:
    """The rows as a text table: long metrics wrap inside their column (never cut), a note under its row."""
    lines = [f"{'claim':<{CLAIM_W}}{'metric':<{METRIC_W + 2}}{'paper':>16}{'reproduced':>14}  verdict"]
    lines.append("-" * len(lines[0]))
    for r in rows:
        value = "-" if r["reproduced"] is None else f"{r['reproduced']:.3g}{r['unit']}"
        metric = textwrap.wrap(r["metric"], METRIC_W, break_on_hyphens=False) or [""]
        lines.append(f"{r['claim_id']:<{CLAIM_W}}{metric[0]:<{METRIC_W + 2}}{r['paper']:>16}{value:>14}  {r['verdict']}")
        lines += [f"{'':<{CLAIM_W}}{more}" for more in metric[1:]]
        if r.get("note"):
            lines += textwrap.wrap(r["note"], NOTE_W, break_on_hyphens=False, initial_indent=" " * (CLAIM_W + 2),
                                   subsequent_indent=" " * (CLAIM_W + 2))
    return "\n".join(lines)
