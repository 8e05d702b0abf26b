"""The sensitivity study's later seeds start at the first seed's reading rates and still read their own limit.
Synthetic curves with a known limit per seed (output rises with the offered load up to `cap`, then falls slowly,
as an overloaded system does), so the test checks the climb, not the simulator."""
from dataclasses import dataclass
from functools import partial

import pytest

from repro.experiments.sensitivity.experiment import climb_seed, reading_rates
from repro.serving.curves import CurveGroup
from repro.serving.plateau import max_tput_tok_s, reaches_plateau
from repro.serving.sweep import in_process
from reference_impl.sim.config import SimConfig

MEAN_OUTPUT = 10


@dataclass(frozen=True)
class FakeRequest:
    output_len: int = MEAN_OUTPUT
    prompt_len: int = 1


def fake_point(cap_by_seed: dict, task) -> dict:
    offered = task.rate_per_s * MEAN_OUTPUT
    cap = cap_by_seed[task.seed]
    out = min(offered, cap) - 0.03 * max(0.0, offered - cap)
    return {"system": task.system, "rate_per_s": task.rate_per_s, "seed": task.seed, "steady_output_tok_s": out,
            "num_finished": len(task.requests), "num_requests": len(task.requests), "wall_s": 0.0}


def group(cap_by_seed: dict) -> CurveGroup:
    return CurveGroup({}, SimConfig(), lambda rate, seed: [FakeRequest()] * 60, ("infinite-llm",), "fake",
                      runner=partial(fake_point, cap_by_seed), start_rate_per_s=1.0)


def test_reading_rates_are_the_top_two_and_the_highest_point():
    points = [{"rate_per_s": r, "steady_output_tok_s": out} for r, out in ((1, 5), (2, 9), (4, 8), (8, 8.2))]
    assert reading_rates(points) == [2, 4, 8]
    assert reading_rates(points[:3] + [{"rate_per_s": 8, "steady_output_tok_s": 9.5}]) == [4, 8]


@pytest.mark.parametrize("later_cap", [105.0, 90.0, 400.0])  # near, below and far beyond the first seed's limit
def test_a_later_seed_starts_at_the_first_seeds_reading_and_reaches_its_own_limit(later_cap):
    caps = {0: 100.0, 1: later_cap}
    first, later = group(caps), group(caps)
    sweep = in_process(lambda line: None)
    sweep.run(climb_seed(first, None, 0, sweep))
    sweep.run(climb_seed(later, first, 1, sweep))
    start = reading_rates(first.probe_points["infinite-llm"])
    points = later.probe_points["infinite-llm"]
    assert [p["rate_per_s"] for p in points[:len(start)]] == start
    assert later.info["_probe_points"] == {} and first.info["_probe_points"]["infinite-llm"]
    for g, seed in ((first, 0), (later, 1)):
        assert reaches_plateau(g.probe_points["infinite-llm"])
        assert 0.95 * caps[seed] <= max_tput_tok_s(g.probe_points["infinite-llm"], seed) <= caps[seed]
