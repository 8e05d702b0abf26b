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
"""
from dataclasses import dataclass, field
from functools import partial

import numpy as np

from repro.serving.tasks import PointTask, nominal_rate_per_s, run_tasks
from repro.serving.plateau import Climb, extend_to_plateau, max_tput_tok_s, plateau_record
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
    probe_fraction: float = 1.0  # share of a point's requests (a prefix) its probes serve
    start_rate_per_s: float | None = None  # the first probe's rate (None: the cost model's estimate; inf: a burst)
    saturation_per_s: dict = field(default_factory=dict)
    rates_per_s: list = field(default_factory=list)
    probe_points: dict = field(default_factory=dict)  # system -> the probe points of find_saturation


def saturation_rate_per_s(point: dict, mean_output: float) -> float:
    return point["steady_output_tok_s"] / mean_output


def find_saturation(groups: list[CurveGroup], seed: int, log, pool) -> None:
    """Fill each group's saturation_per_s by probing all groups' systems together (one pool round per probe)."""
    pending = []
    for g in groups:
        requests = probe_requests(g, 1.0, seed)
        g.info["_mean_output"] = float(np.mean([r.output_len for r in requests]))
        start = g.start_rate_per_s or nominal_rate_per_s(g.base, requests)
        pending += [(g, s, start) for s in g.systems]
    grown, refined = {}, set()  # (group, system) -> probes grown so far; those refined once
    while pending:
        tasks = [PointTask(s, g.base, probe_requests(g, rate, seed), rate, f"{g.label} probe", seed, g.runner,
                           steady_only=True) for g, s, rate in pending]
        retry = []
        for (g, s, rate), p in zip(pending, run_tasks(tasks, log, pool)):
            key = (id(g), s)
            g.probe_points.setdefault(s, []).append(p)
            sustained = saturation_rate_per_s(p, g.info["_mean_output"])
            g.saturation_per_s[s] = max(sustained, g.saturation_per_s.get(s, 0.0))
            if key in refined:
                continue
            if sustained >= KEEPS_UP * rate and grown.get(key, 0) < MAX_PROBES - 1:
                grown[key] = grown.get(key, 0) + 1
                retry.append((g, s, rate * PROBE_GROWTH))
            elif sustained > 0:
                refined.add(key)
                retry.append((g, s, REFINE * sustained))
        pending = retry


def probe_requests(g: CurveGroup, rate_per_s: float, seed: int) -> tuple:
    """A probe serves the first `g.probe_fraction` of the point's requests (a prefix of the same arrivals)."""
    requests = g.make_requests(rate_per_s, seed)
    return tuple(requests[:max(MIN_PROBE_REQUESTS, int(g.probe_fraction * len(requests)))])


def rate_grid(saturation_per_s: dict) -> list[float]:
    low, high = min(saturation_per_s.values()), max(saturation_per_s.values())
    rates = [low * m for m in LOW_MULTIPLIERS] + [high * m for m in HIGH_MULTIPLIERS]
    if high > MID_GAP * low:  # the middle replaces the last low rate: six rates either way
        rates[len(LOW_MULTIPLIERS) - 1] = (low * high) ** 0.5
    return sorted({float(f"{r:.4g}") for r in rates if r > 0})


def run_curves(groups: list[CurveGroup], seeds: tuple[int, ...], log, pool) -> list[dict]:
    """The group records (serving.schema.json `group`) of `groups`, each with every system at every rate and
    seed; saturation is searched on the first seed."""
    find_saturation(groups, seeds[0], log, pool)
    tasks, counts = [], []
    for g in groups:
        g.rates_per_s = rate_grid(g.saturation_per_s)
        log(f"{g.label}: saturation {_fmt(g.saturation_per_s)} req/s; rates {g.rates_per_s}")
        group_tasks = [PointTask(s, g.base, tuple(g.make_requests(rate, seed)), rate, g.label, seed, g.runner)
                       for seed in seeds for rate in g.rates_per_s for s in g.systems]
        tasks += group_tasks
        counts.append(len(group_tasks))
    points = iter(run_tasks(tasks, log, pool))
    per_group = [[next(points) for _ in range(n)] for n in counts]
    climbs = [{s: Climb([p for p in own if p["system"] == s], partial(_seed_tasks, g, s, seeds)) for s in g.systems}
              for g, own in zip(groups, per_group)]
    extend_to_plateau([c for by_system in climbs for c in by_system.values()], log, pool)
    return [group_record(g, own, seeds, by_system) for g, own, by_system in zip(groups, per_group, climbs)]


def _seed_tasks(g: CurveGroup, system: str, seeds, rate_per_s: float) -> list[PointTask]:
    return [PointTask(system, g.base, tuple(g.make_requests(rate_per_s, seed)), rate_per_s, f"{g.label} plateau",
                      seed, g.runner) for seed in seeds]


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
