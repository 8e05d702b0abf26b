"""What an experiment is: a run function that returns JSON-able data, a plot function, and claim rows."""
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class RunParams:
    """Options every experiment receives from `repro run`; `extra` holds `--param key=value` pairs."""

    quick: bool = False
    backend: str = "sim"
    seed: int = 0
    address: str | None = None
    extra: dict = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ClaimRow:
    """One line of `repro report`: a headline claim of claims.json beside the reproduced number."""

    claim_id: str
    metric: str
    paper: str  # the paper's value or range, as printed
    paper_low: float | None
    paper_high: float | None
    reproduced: float | None
    unit: str = ""
    note: str = ""

    @property
    def verdict(self) -> str:
        if self.reproduced is None:
            return "not reproduced"
        if self.paper_low is None or self.paper_high is None:
            return "no range"
        return "inside" if self.paper_low <= self.reproduced <= self.paper_high else "outside"


@dataclass(frozen=True, slots=True)
class Experiment:
    name: str
    figures: tuple[str, ...]  # paper figures it reproduces, e.g. ("infinite-llm Fig 7",)
    schema: str  # file name under repro/schemas/ validating the result's "data"
    run: Callable[[RunParams, Callable[[str], None]], dict]  # (params, log) -> data
    run_id: Callable[[RunParams], str]
    plot: Callable[[list[dict], str], list[str]] | None = None  # (results, figures_dir) -> files written
    claims: Callable[[list[dict]], list[ClaimRow]] | None = None
    backends: tuple[str, ...] = ("sim",)
    params: tuple = ()  # the `--param` keys it takes (repro/framework/params.py Param); (): none
    # async (params, log, sweep) -> data: its simulated points on a caller's sweep (repro/serving/sweep.py), so
    # several experiments share one (repro figures); None: it runs no sweep
    on_sweep: Callable | None = None


def default_run_id(params: RunParams) -> str:
    return f"{params.backend}-{'quick' if params.quick else 'full'}-seed{params.seed}"
