"""The serving curve method shared by e2e, e2e-datasets and sensitivity.

1. Saturation by measurement: each system serves the group's requests at a probe rate (starting at the cost
   model's estimate, nominal_rate_per_s, or the group's own start: a burst for real runs); the steady-state
   output rate over the mean output length is the request rate it sustains. A probe that keeps up (sustained
   >= KEEPS_UP of offered) is retried at PROBE_GROWTH times the rate; one that does not is refined once at
   REFINE times what it sustained (just past saturation: a heavily overloaded system may sustain less than one
   at its limit). The saturation
   rate is the most any probe sustained. A group may probe with the first `probe_fraction` of a point's
   requests (at least MIN_PROBE_REQUESTS): a probe only places the grid, whose points then serve them all.
2. Rate grid: the same rates for every system of a group, LOW_MULTIPLIERS of the lower saturation (0.25x is
   near the unloaded latency), and HIGH_MULTIPLIERS of the higher one (past both); when the saturations
   differ by more than MID_GAP, their geometric middle replaces the last low multiplier (six rates either way).
3. Every rate runs with every seed (lengths, arrivals and the simulator's seed change together).
4. Plateau (repro/serving/plateau.py): a system whose curve still rises by more than PLATEAU_TOL from the grid's
   second-highest rate to its highest (medians over seeds) runs at twice its top rate, with every seed, until
   the top two agree (at most MAX_EXTENSIONS more rates); the curve is drawn up to there.
5. Max throughput (the papers' "maximum achieved throughput"): per system and seed, the highest steady-state
   output rate of its curve. The group's ratio is taken per seed; its median is `max_tput_ratio`, its min and
   max the spread. `grid_max_tput_ratio` is the same read off the grid alone (the method before the plateau
   rule, on the same points), so a result says how far the extension moved the ratio.

Each step waits only for the points it reads (coroutines over the run's sweep, repro/serving/sweep.py): a system's
next probe for its last, a group's grid for its saturations, a system's climb for its own grid points; groups
and systems proceed together.
"""
from dataclasses import dataclass, field
from functools import partial

import numpy as np

from repro.serving.tasks import PointTask, RequestSpec, nominal_rate_per_s
from repro.serving.plateau import Climb, climb_to_plateau, max_tput_tok_s, plateau_record
from repro.serving.sweep import in_process
from reference_impl.sim.config import SimConfig

KEEPS_UP = 0.8
PROBE_GROWTH = 4.0
REFINE = 1.25
MAX_PROBES = 3
MIN_PROBE_REQUESTS = 60
LONG_PROBE_FRACTION = 0.5  # long-request groups (Fig 10b, the datasets) probe with half; short ones with all
LOW_MULTIPLIERS = (0.25, 0.5, 0.75, 0.9)
MID_GAP = 1.2
HIGH_MULTIPLIERS = (1.15, 1.5)


@dataclass(slots=True)
class CurveGroup:
    """One panel of a figure: systems on one cluster and workload. `make_requests(rate, seed)` gives the
    requests (the same lengths at every rate of a seed); `info` is copied into the group record."""
    info: dict
    base: SimConfig
    make_requests: object
    systems: tuple[str, ...]
    label: str
    runner: object = None  # PointTask.runner for every point of the group (None: run_point)
    answer: object = None  # PointTask.answer for every point of the group (None: each point runs)
    probe_fraction: float = 1.0  # share of a point's requests (a prefix) its probes serve
    start_rate_per_s: float | None = None  # the first probe's rate (None: the cost model's estimate; inf: a burst)
    saturation_per_s: dict = field(default_factory=dict)
    rates_per_s: list = field(default_factory=list)
    probe_points: dict = field(default_factory=dict)  # system -> the probe points of find_saturation


def saturation_rate_per_s(point: dict, mean_output: float) -> float:
    return point["steady_output_tok_s"] / mean_output


async def find_saturation(g: CurveGroup, seed: int, sweep) -> None:
    """Fill `g.saturation_per_s` and `g.probe_points`: each system's probes (probe_chain), the systems at once."""
    requests = probe_requests(g, 1.0, seed)
    g.info["_mean_output"] = float(np.mean([r.output_len for r in requests]))
    start = g.start_rate_per_s or nominal_rate_per_s(g.base, requests)
    chains = await sweep.gather(*(probe_chain(g, s, start, seed, sweep) for s in g.systems))
    for s, points in zip(g.systems, chains):
        g.probe_points.setdefault(s, []).extend(points)
        sustained = (saturation_rate_per_s(p, g.info["_mean_output"]) for p in points)
        g.saturation_per_s[s] = max(g.saturation_per_s.get(s, 0.0), *sustained)


async def probe_chain(g: CurveGroup, system: str, rate_per_s: float, seed: int, sweep) -> list[dict]:
    """One system's probes from `rate_per_s`: a probe that keeps up is retried at PROBE_GROWTH times the rate (at
    most MAX_PROBES - 1 times), one that does not once at REFINE times what it sustained."""
    points, grown, refined = [], 0, False
    while True:
        p = await sweep.point(PointTask(system, g.base, probe_spec(g, rate_per_s, seed), rate_per_s,
                                        f"{g.label} probe", seed, g.runner, steady_only=True, answer=g.answer))
        points.append(p)
        sustained = saturation_rate_per_s(p, g.info["_mean_output"])
        if refined:
            return points
        if sustained >= KEEPS_UP * rate_per_s and grown < MAX_PROBES - 1:
            grown += 1
            rate_per_s *= PROBE_GROWTH
        elif sustained > 0:
            refined = True
            rate_per_s = REFINE * sustained
        else:
            return points


def probe_spec(g: CurveGroup, rate_per_s: float, seed: int) -> RequestSpec:
    """A probe serves the first `g.probe_fraction` of the point's requests (a prefix of the same arrivals)."""
    return RequestSpec(g.make_requests, rate_per_s, seed, g.probe_fraction, MIN_PROBE_REQUESTS)


def probe_requests(g: CurveGroup, rate_per_s: float, seed: int) -> tuple:
    return probe_spec(g, rate_per_s, seed).build()


def rate_grid(saturation_per_s: dict) -> list[float]:
    low, high = min(saturation_per_s.values()), max(saturation_per_s.values())
    rates = [low * m for m in LOW_MULTIPLIERS] + [high * m for m in HIGH_MULTIPLIERS]
    if high > MID_GAP * low:  # the middle replaces the last low rate: six rates either way
        rates[len(LOW_MULTIPLIERS) - 1] = (low * high) ** 0.5
    return sorted({float(f"{r:.4g}") for r in rates if r > 0})


def run_curves(groups: list[CurveGroup], seeds: tuple[int, ...], log, sweep=None) -> list[dict]:
    """The group records (serving.schema.json `group`) of `groups`, each with every system at every rate and
    seed; saturation is searched on the first seed. `sweep` (repro/serving/sweep.py; None: this process) runs the
    points, all groups at once."""
    sweep = sweep or in_process(log)
    return sweep.run(curves(groups, seeds, sweep))


async def curves(groups: list[CurveGroup], seeds: tuple[int, ...], sweep) -> list[dict]:
    return await sweep.gather(*(curve(g, seeds, sweep) for g in groups))


async def curve(g: CurveGroup, seeds: tuple[int, ...], sweep) -> dict:
    """One group's record: its saturation search, then its grid (submitted at once), then each system's climb to
    its plateau as soon as that system's grid points are done."""
    await find_saturation(g, seeds[0], sweep)
    g.rates_per_s = rate_grid(g.saturation_per_s)
    sweep.log(f"{g.label}: saturation {_fmt(g.saturation_per_s)} req/s; rates {g.rates_per_s}")
    tasks = [PointTask(s, g.base, RequestSpec(g.make_requests, rate, seed), rate, g.label, seed, g.runner,
                       answer=g.answer) for seed in seeds for rate in g.rates_per_s for s in g.systems]
    grid = [None] * len(tasks)

    async def climb(system: str) -> Climb:
        mine = [i for i, t in enumerate(tasks) if t.system == system]
        own = await sweep.points([tasks[i] for i in mine])
        for i, p in zip(mine, own):
            grid[i] = p
        c = Climb(list(own), partial(_seed_tasks, g, system, seeds))
        await climb_to_plateau(c, sweep)
        return c

    climbs = dict(zip(g.systems, await sweep.gather(*(climb(s) for s in g.systems))))  # the whole grid at once
    return group_record(g, grid, seeds, climbs)


def _seed_tasks(g: CurveGroup, system: str, seeds, rate_per_s: float) -> list[PointTask]:
    return [PointTask(system, g.base, RequestSpec(g.make_requests, rate_per_s, seed), rate_per_s,
                      f"{g.label} plateau", seed, g.runner, answer=g.answer) for seed in seeds]


def _fmt(rates: dict) -> str:
    return ", ".join(f"{s} {r:.4g}" for s, r in rates.items())


def group_record(g: CurveGroup, grid_points: list[dict], seeds, climbs: dict) -> dict:
    """The group's record: the grid's points and those its systems' climbs added, the plateau per system and
    seed, and the ratio with its spread, on the whole curves and on the grid alone."""
    info = {k: v for k, v in g.info.items() if not k.startswith("_")}
    baseline = info["baseline"]
    points = grid_points + [p for s in g.systems for p in climbs[s].points[len(_own(grid_points, s)):]]
    plateau = {s: [max_tput_tok_s(_own(points, s), seed) for seed in seeds] for s in g.systems}
    grid = {s: [max_tput_tok_s(_own(grid_points, s), seed) for seed in seeds] for s in g.systems}
    ratios, grid_ratios = _ratios(plateau, baseline), _ratios(grid, baseline)
    return {**info, "num_instances": g.base.engine.num_instances, "tp": g.base.tp, "rates_per_s": g.rates_per_s,
            "seeds": list(seeds), "saturation_per_s": dict(g.saturation_per_s), "max_tput_tok_s": plateau,
            "points": points, "max_tput_ratio": float(np.median(ratios)) if ratios else None,
            "max_tput_ratio_min": min(ratios) if ratios else None,
            "max_tput_ratio_max": max(ratios) if ratios else None,
            "plateau": {s: plateau_record(climbs[s].points, climbs[s].added_rates_per_s) for s in g.systems},
            "grid_max_tput_tok_s": grid,
            "grid_max_tput_ratio": float(np.median(grid_ratios)) if grid_ratios else None}


def _own(points: list[dict], system: str) -> list[dict]:
    return [p for p in points if p["system"] == system]


def _ratios(plateau: dict, baseline: str) -> list[float]:
    if "infinite-llm" not in plateau or baseline not in plateau:  # a group without either (the designs experiment)
        return []
    return [a / b for a, b in zip(plateau["infinite-llm"], plateau[baseline]) if b > 0]


def ratio_text(group: dict) -> str:
    """'1.23x (1.20-1.27, 3 seeds)' for claims and figure titles."""
    ratio = group.get("max_tput_ratio")
    if ratio is None:
        return "-"
    low, high = group.get("max_tput_ratio_min"), group.get("max_tput_ratio_max")
    if low is None or len(group.get("seeds", [])) < 2:
        return f"{ratio:.2f}x"
    return f"{ratio:.2f}x ({low:.2f}-{high:.2f}, {len(group['seeds'])} seeds)"
