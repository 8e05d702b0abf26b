"""The plateau rule (repro/serving/plateau.py): a curve counts as at its plateau when its top two rates
agree within PLATEAU_TOL; one that still rises is extended at twice its top rate until they do (at most
MAX_EXTENSIONS times); on an e2e --quick run the curves reach it and max throughput is read there."""
import numpy as np
import pytest

from repro.framework.base import RunParams
from repro.framework.registry import get_experiment
from repro.serving.tasks import PointTask
from repro.regression.hashes import without_wall_s
from repro.serving.plateau import (MAX_EXTENSIONS, PLATEAU_GROWTH, PLATEAU_TOL, Climb, climb_to_plateau,
                                   extend_to_plateau, reaches_plateau, top_rise)
from repro.serving.sweep import in_process

LIMIT_TOK_S = 1000.0


def _point(rate_per_s: float, tok_s: float, seed: int = 0) -> dict:
    return {"system": "s", "rate_per_s": rate_per_s, "seed": seed, "steady_output_tok_s": tok_s,
            "num_finished": 1, "num_requests": 1, "wall_s": 0.0}


def _saturating(task: PointTask) -> dict:
    """A system whose output follows the load (100 tokens a request) and bends towards LIMIT_TOK_S."""
    offered = 100 * task.rate_per_s
    return _point(task.rate_per_s, LIMIT_TOK_S * (1 - np.exp(-offered / LIMIT_TOK_S)), task.seed)


def _always_rising(task: PointTask) -> dict:
    return _point(task.rate_per_s, 10 * task.rate_per_s, task.seed)


def _tasks(runner, seeds, rate_per_s):
    return [PointTask("s", None, (), rate_per_s, "test", seed, runner) for seed in seeds]


def test_rule_reads_the_median_over_seeds_of_the_top_two_rates():
    flat = [_point(1, 100, 0), _point(2, 103, 0), _point(2, 150, 1), _point(2, 90, 2)]
    assert top_rise(flat) == pytest.approx(0.03) and reaches_plateau(flat)
    rising = flat + [_point(4, 120, 0)]
    assert top_rise(rising) > PLATEAU_TOL and not reaches_plateau(rising)
    falling = flat + [_point(4, 80, 0)]
    assert not reaches_plateau(falling)  # a drop past the tolerance is not a plateau either
    assert top_rise([_point(1, 100)]) is None and not reaches_plateau([_point(1, 100)])


def test_a_rising_curve_is_doubled_until_its_top_two_agree():
    seeds = (0, 1)
    climb = Climb([_saturating(t) for rate in (5.0, 10.0) for t in _tasks(_saturating, seeds, rate)],
                  lambda rate: _tasks(_saturating, seeds, rate))
    assert not reaches_plateau(climb.points)
    extend_to_plateau([climb], log=lambda line: None)
    assert reaches_plateau(climb.points)
    rates = [10.0] + climb.added_rates_per_s
    assert all(b == pytest.approx(PLATEAU_GROWTH * a, rel=1e-3) for a, b in zip(rates, rates[1:]))
    assert {p["seed"] for p in climb.points if p["rate_per_s"] == rates[-1]} == set(seeds)
    top = max(p["steady_output_tok_s"] for p in climb.points)
    assert top > 1.2 * max(_saturating(t)["steady_output_tok_s"] for t in _tasks(_saturating, seeds, 10.0))


def test_extension_stops_after_max_extensions_and_a_flat_curve_is_left_alone():
    rising = Climb([_point(1, 10), _point(2, 20)], lambda rate: _tasks(_always_rising, (0,), rate))
    flat = Climb([_point(1, 100), _point(2, 101)], lambda rate: pytest.fail("a flat curve is not extended"))
    extend_to_plateau([rising, flat], log=lambda line: None)
    assert len(rising.added_rates_per_s) == MAX_EXTENSIONS and not reaches_plateau(rising.points)
    assert flat.added_rates_per_s == []


def test_e2e_quick_curves_reach_their_plateau_and_max_throughput_is_read_there():
    data = get_experiment("e2e").run(RunParams(quick=True, extra={"traces": "0", "seeds": "2", "workers": "1"}),
                                     lambda line: None)
    (g,) = data["groups"]
    for system, record in g["plateau"].items():
        own = [p for p in g["points"] if p["system"] == system]
        assert record["reached"] and reaches_plateau(own) and record["top_rise"] == pytest.approx(top_rise(own))
        for i, seed in enumerate(g["seeds"]):
            assert g["max_tput_tok_s"][system][i] == max(p["steady_output_tok_s"] for p in own if p["seed"] == seed)
            assert g["max_tput_tok_s"][system][i] >= g["grid_max_tput_tok_s"][system][i]
    ratios = [a / b for a, b in zip(g["max_tput_tok_s"]["infinite-llm"], g["max_tput_tok_s"][g["baseline"]])]
    assert g["max_tput_ratio"] == pytest.approx(float(np.median(ratios)))


def _plateau_after(n: int):
    """A curve that rises 50% a doubling for its first n doublings past rate 2, then stays flat."""
    def runner(task: PointTask) -> dict:
        steps = min(n, max(0, round(np.log2(task.rate_per_s / 2))))
        return _point(task.rate_per_s, 100 * 1.5 ** steps + task.seed, task.seed)
    return runner


def _climb(runner, seeds=(0, 1)):
    return Climb([runner(t) for rate in (1.0, 2.0) for t in _tasks(runner, seeds, rate)],
                 lambda rate: _tasks(runner, seeds, rate))


@pytest.mark.parametrize("ahead", [1, 2, 5])
@pytest.mark.parametrize("runner", [_plateau_after(0), _plateau_after(1), _plateau_after(3), _always_rising],
                         ids=["flat", "one", "three", "rising"])
def test_doublings_submitted_ahead_add_the_same_rates_and_points(ahead, runner):
    reference, sweep = _climb(runner), in_process(lambda line: None)
    sweep.run(climb_to_plateau(reference, sweep))
    climb, sweep = _climb(runner), in_process(lambda line: None)
    sweep.ahead = ahead
    sweep.run(climb_to_plateau(climb, sweep))
    assert climb.added_rates_per_s == reference.added_rates_per_s and climb.points == reference.points
    ran = sorted({n.rate_per_s for n in sweep.graph.nodes})
    needed = len(reference.added_rates_per_s)
    # the unneeded rates ran (into no curve), at most `ahead` past the last needed one
    assert needed <= len(ran) <= min(MAX_EXTENSIONS, needed + ahead) or needed == 0
    # each submitted batch waits for what was known when it went, not for the doubling before it
    after = {n.rate_per_s: set(n.after) for n in sweep.graph.nodes}
    if needed >= 2:
        first, second = reference.added_rates_per_s[:2]
        ids_of_first = {n.id for n in sweep.graph.nodes if n.rate_per_s == first}
        assert not after[second] & ids_of_first


def test_e2e_quick_curves_equal_with_doublings_ahead():
    def run(ahead):
        data = get_experiment("e2e").run(RunParams(quick=True, extra={"traces": "0", "seeds": "2", "workers": "1",
                                                                      "store": "off", "ahead": ahead}),
                                         lambda line: None)
        return without_wall_s(data)
    assert run("0") == run("3")
