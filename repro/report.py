"""`repro report`: one row per (headline claim, metric), from saved results only."""
from dataclasses import asdict

from repro.accuracy import accuracy_rows
from repro.claims import headline_claims
from repro.experiments.designs.report import design_rows
from repro.framework.registry import EXPERIMENTS, get_experiment
from repro.results import load_results


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
                         "paper": "", "reproduced": None, "unit": "", "verdict": "not reproduced",
                         "note": "no experiment result yet"})
        for row in found:
            rows.append({**asdict(row), "figure": claim["figure"], "verdict": row.verdict})
    return rows + design_rows(results_dir) + accuracy_rows(results_dir)


def format_report(rows: list[dict]) -> str:
    lines = [f"{'claim':<24}{'metric':<44}{'paper':>16}{'reproduced':>14}  verdict"]
    lines.append("-" * len(lines[0]))
    for r in rows:
        value = "-" if r["reproduced"] is None else f"{r['reproduced']:.3g}{r['unit']}"
        metric = r["metric"] if len(r["metric"]) <= 42 else r["metric"][:41] + "~"
        lines.append(f"{r['claim_id']:<24}{metric:<44}{r['paper']:>16}{value:>14}  {r['verdict']}")
        if r.get("note"):
            lines.append(f"{'':<24}  {r['note']}")
    return "\n".join(lines)
