"""`repro report`'s lines of the designs experiment: each design's own headline claim (claims.py) on the run the
figure shows (the last full run with default params, else the last); none before a designs run."""
from repro.experiments.designs.claims import claim_rows


def design_rows(results_dir: str) -> list[dict]:
    from repro.framework.figures import main_result
    from repro.framework.registry import get_experiment
    from repro.results import load_results
    results = load_results(results_dir, get_experiment("designs"))
    return claim_rows(main_result(results)) if results else []
