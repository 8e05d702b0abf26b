"""The sweep's task graph (repro/serving/task_graph.py) and its schedule on N cores (repro/benchmarks/schedule.py):
each point waits for what its curve search read and nothing else; list scheduling meets the bounds any schedule
meets and Graham's bound for list schedules; the critical path is the longest chain (brute force on small graphs)."""
import itertools
import json
import math
import random

import pytest

from repro.benchmarks.schedule import critical_path, schedule_s
from repro.framework.base import RunParams
from repro.framework.registry import get_experiment


def _random_dag(rng: random.Random, n: int):
    costs = [rng.uniform(0.1, 3.0) for _ in range(n)]
    after = [sorted(rng.sample(range(i), rng.randint(0, min(i, 3)))) for i in range(n)]
    return costs, after


def _longest_chain(costs, after):
    """Every path by brute force: the largest sum of costs along a chain of waits."""
    best = 0.0
    for end in range(len(costs)):
        stack = [(end, costs[end])]
        while stack:
            node, total = stack.pop()
            best = max(best, total)
            stack += [(d, total + costs[d]) for d in after[node]]
    return best


def test_a_chain_takes_its_sum_and_independent_points_fill_the_cores():
    assert schedule_s([1.0, 2.0, 3.0], [[], [0], [1]], cores=8) == pytest.approx(6.0)
    assert schedule_s([1.0] * 10, [[]] * 10, cores=4) == pytest.approx(math.ceil(10 / 4))
    assert critical_path([1.0, 2.0, 3.0], [[], [0], [1]]) == (pytest.approx(6.0), [0, 1, 2])


@pytest.mark.parametrize("seed", range(20))
def test_list_schedules_meet_the_bounds(seed):
    rng = random.Random(seed)
    costs, after = _random_dag(rng, rng.randint(1, 40))
    path_s, path = critical_path(costs, after)
    assert path_s == pytest.approx(_longest_chain(costs, after))
    assert sum(costs[i] for i in path) == pytest.approx(path_s)
    assert all(a in after[b] for a, b in itertools.pairwise(path))
    assert schedule_s(costs, after, 1) == pytest.approx(sum(costs))
    for cores in (2, 3, 16):
        got = schedule_s(costs, after, cores)
        assert max(path_s, sum(costs) / cores) - 1e-9 <= got <= sum(costs) / cores + (1 - 1 / cores) * path_s + 1e-9


def test_each_point_waits_for_what_its_curve_search_read(tmp_path):
    path = tmp_path / "graph.json"
    get_experiment("e2e").run(RunParams(quick=True, extra={"traces": "0", "seeds": "2", "short_requests": "40",
                                                           "workers": "1", "graph": str(path)}), lambda line: None)
    nodes = json.loads(path.read_text())
    assert all(a < n["id"] for n in nodes for a in n["after"]) and all(n["cpu_s"] > 0 for n in nodes)
    probes = [n for n in nodes if n["label"].endswith(" probe")]
    grid = [n for n in nodes if not n["label"].endswith((" probe", " plateau"))]
    last_probe = {s: max(n["id"] for n in probes if n["system"] == s) for s in {n["system"] for n in probes}}
    for n in probes:  # a probe waits for the system's previous probe only
        earlier = [p["id"] for p in probes if p["system"] == n["system"] and p["id"] < n["id"]]
        assert n["after"] == earlier[-1:]
    assert grid and all(set(n["after"]) == set(last_probe.values()) for n in grid)  # both systems' saturation
    by_id = {n["id"]: n for n in nodes}
    for n in nodes:
        if n["label"].endswith(" plateau"):  # a climb reads its own system's points only
            assert n["after"] and {by_id[a]["system"] for a in n["after"]} == {n["system"]}
