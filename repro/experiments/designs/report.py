"""`repro report`'s lines of the designs experiment: each design's own headline claim (claims.py) on the run the
figure shows (the last full run with default params, else the last); none before a designs run. Lamina's claim in
its own setting (the paper's models and contexts, one cluster each) is the lamina experiment's serving part
(repro/experiments/lamina/serving.py), cited from its result rather than run again: one row per model."""
from repro.experiments.designs.claims import LAMINA_PAPER, claim_rows
from repro.framework.base import ClaimRow


def design_rows(results_dir: str) -> list[dict]:
    from repro.framework.figures import main_result
    from repro.framework.registry import get_experiment
    from repro.results import load_results
    results = load_results(results_dir, get_experiment("designs"))
    lamina = load_results(results_dir, get_experiment("lamina"))
    served = lamina_served_rows(main_result(lamina)) if lamina else []
    return (claim_rows(main_result(results)) if results else []) + served


def lamina_served_rows(result: dict) -> list[dict]:
    """Lamina over vLLM in served tokens/s per $1,000 per model of a lamina result's `serving` rows: the highest
    ratio over its contexts against the paper's range, the lowest in the note."""
    rows, paper, low, high, source = [], *LAMINA_PAPER
    serving = result["data"].get("serving") or []
    for model in dict.fromkeys(r["model"] for r in serving):
        by = {(r["context"], r["system"]): r["served_tok_s_per_kusd"] for r in serving if r["model"] == model}
        ratios = {c: by[c, "Lamina"] / by[c, "vLLM"] for c, s in by if s == "Lamina" and by.get((c, "vLLM"))}
        if not ratios:
            continue
        best = max(ratios, key=ratios.get)
        worst = min(ratios, key=ratios.get)
        row = ClaimRow("lamina", f"tput per $ vs vLLM, {model}, own setting", paper, low, high, ratios[best], "x",
                       f"{result['run_id']} of the lamina experiment (served, one cluster each): "
                       f"{ratios[worst]:.2f}x at context {worst} to {ratios[best]:.2f}x at {best}")
        verdict = "inside" if low < ratios[best] <= high else "outside"
        rows.append({**{k: getattr(row, k) for k in ClaimRow.__slots__}, "figure": source, "verdict": verdict})
    return rows
