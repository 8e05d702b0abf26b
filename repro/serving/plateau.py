"""Max throughput measured at the plateau: open-loop rates extended until the curve stops rising.

A system's curve (its points over rates and seeds) has reached its plateau when the median over seeds of the
steady-state output rate at its highest rate is within PLATEAU_TOL of the median at its second-highest rate.
A curve that has not is extended: its top rate times PLATEAU_GROWTH runs with every seed, up to
MAX_EXTENSIONS times (the curves and the sensitivity study's single-seed climbs alike; a caller may allow fewer). Max
throughput is then, per seed, the highest steady-state output rate of the curve (docs/max-throughput.md). Past
saturation a queue builds and the batch keeps filling towards its memory or batch-cap limit as the rate rises, so
a grid that stops just past saturation under-reads each system by its own amount; doubling the rate until two
agree reads both at their limit.

Speculation (`ahead`, the sweep's: repro/serving/sweep.py default_ahead): a climb may submit its next doublings
before the rule asks for them, `ahead` rates past the one it needs, so that on many cores a climb of n doublings
takes about n / (ahead + 1) point times instead of n. The rule still reads the rates one at a time, in order: a rate
it did not ask for never joins the curve (its point, run, only lands in the store), so the rates added and max
throughput are those of `ahead` 0 (tested).
"""
from dataclasses import dataclass, field

import numpy as np

from repro.serving.sweep import in_process

PLATEAU_TOL = 0.05
PLATEAU_GROWTH = 2.0
# Past about 8x the grid's top the points are near-bursts whose medians over 3 seeds still move by 10-20% from one
# rate to the next; 6 doublings let such a tail settle (docs/max-throughput.md)
MAX_EXTENSIONS = 6

def median_by_rate(points: list[dict], key: str = "steady_output_tok_s") -> list[tuple[float, float]]:
    """(rate, median over seeds of `key`) per rate, ascending."""
    rates = sorted({p["rate_per_s"] for p in points})
    return [(r, float(np.median([p[key] for p in points if p["rate_per_s"] == r]))) for r in rates]


def top_rise(points: list[dict]) -> float | None:
    """Relative change of the median steady-state output rate from the second-highest rate to the highest
    (None with fewer than two rates or nothing at the second)."""
    curve = median_by_rate(points)
    if len(curve) < 2 or curve[-2][1] <= 0:
        return None
    return curve[-1][1] / curve[-2][1] - 1


def reaches_plateau(points: list[dict], tol: float = PLATEAU_TOL) -> bool:
    rise = top_rise(points)
    return rise is not None and abs(rise) <= tol


def max_tput_tok_s(points: list[dict], seed: int) -> float:
    """Max throughput of one seed of a curve: its highest steady-state output rate."""
    return max((p["steady_output_tok_s"] for p in points if p["seed"] == seed), default=0.0)


@dataclass(slots=True)
class Climb:
    """One system's curve to extend: its points so far (any seeds; extended in place) and `make_tasks(rate)`, the
    PointTasks (one per seed) of a further rate."""
    points: list
    make_tasks: object
    added_rates_per_s: list = field(default_factory=list)

    @property
    def top_rate_per_s(self) -> float:
        return max(p["rate_per_s"] for p in self.points)


def extend_to_plateau(climbs: list[Climb], log, sweep=None, max_extensions: int = MAX_EXTENSIONS) -> None:
    """Extend every climb whose curve has not reached its plateau (module docstring), all at once, each at most
    `max_extensions` times; `sweep` (repro/serving/sweep.py; None: this process) runs the points."""
    sweep = sweep or in_process(log)
    sweep.run(climbs_to_plateau(climbs, sweep, max_extensions))


async def climbs_to_plateau(climbs: list[Climb], sweep, max_extensions: int = MAX_EXTENSIONS) -> None:
    await sweep.gather(*(climb_to_plateau(c, sweep, max_extensions) for c in climbs))


def next_rate(rate_per_s: float) -> float:
    return float(f"{rate_per_s * PLATEAU_GROWTH:.4g}")


async def climb_to_plateau(c: Climb, sweep, max_extensions: int = MAX_EXTENSIONS) -> None:
    """One climb: its next rate as soon as its own points say it has not reached its plateau, with `sweep.ahead`
    further doublings submitted before they are asked for (module docstring)."""
    ahead = getattr(sweep, "ahead", 0)
    submitted: list[tuple[float, object]] = []  # (rate, sweep.start task of its points), in rate order
    try:
        for done in range(max_extensions):
            if reaches_plateau(c.points) or not any(p["steady_output_tok_s"] > 0 for p in c.points):
                return
            rate = next_rate(c.top_rate_per_s)
            c.added_rates_per_s.append(rate)
            if not ahead:
                c.points += await sweep.points(c.make_tasks(rate))
                continue
            while len(submitted) < min(ahead + 1, max_extensions - done):
                further = next_rate(submitted[-1][0]) if submitted else rate
                submitted.append((further, sweep.start(sweep.points(c.make_tasks(further)))))
            submitted_rate, task = submitted.pop(0)
            assert submitted_rate == rate, (submitted_rate, rate)
            c.points += await sweep.join(task)
    finally:
        for _, task in submitted:  # not asked for: the points run on (into the store) but join no curve
            task.add_done_callback(_quiet)


def _quiet(task) -> None:
    if not task.cancelled():
        task.exception()  # retrieved: an unneeded point's failure is not this run's


def plateau_record(points: list[dict], added_rates_per_s: list) -> dict:
    """What a result keeps of one system's climb: the rates added past the grid and the last rise."""
    rise = top_rise(points)
    return {"added_rates_per_s": list(added_rates_per_s), "top_rise": rise,
            "reached": rise is not None and abs(rise) <= PLATEAU_TOL}
