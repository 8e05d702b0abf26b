"""`repro report`'s lines of the designs experiment: each design's own headline claim (claims.py) on the run the
figure shows (the last full run with default params, else the last), or "not yet measured" without one."""
from repro.experiments.designs.claims import CLAIMS, claim_rows, not_measured


def design_rows(results_dir: str) -> list[dict]:
    from repro.framework.figures import main_result
    from repro.framework.registry import get_experiment
    from repro.results import load_results
    results = load_results(results_dir, get_experiment("designs"))
    if not results:
        return [not_measured(d, c, "no designs result yet") for d, claims in CLAIMS.items() for c in claims]
    return claim_rows(main_result(results))
