"""DGFM: directed-cycle search and recall/swap on the rManagers."""
import numpy as np
from hypothesis import given, settings, strategies as st

from reference_impl.control.dgfm import debt_graph, execute_swap, find_cycle
from reference_impl.control.engine_config import EngineConfig, GManagerConfig
from reference_impl.control.gmanager import GManager
from reference_impl.control.protocol import InstanceStatus
from reference_impl.control.rmanager import RManager


def is_acyclic(graph, nodes):
    indeg = {n: 0 for n in nodes}
    for cs in graph.values():
        for c in cs:
            indeg[c] += 1
    ready = [n for n in nodes if indeg[n] == 0]
    seen = 0
    while ready:
        n = ready.pop()
        seen += 1
        for c in graph.get(n, {}):
            indeg[c] -= 1
            if indeg[c] == 0:
                ready.append(c)
    return seen == len(nodes)


@settings(max_examples=200, deadline=None)
@given(st.sets(st.tuples(st.integers(0, 6), st.integers(0, 6)).filter(lambda e: e[0] != e[1]), max_size=14))
def test_find_cycle_matches_topological_sort(edges):
    graph = {}
    for x, y in edges:
        graph.setdefault(x, {})[y] = 1
    nodes = list(range(7))
    cycle = find_cycle(graph, nodes)
    assert (cycle is None) == is_acyclic(graph, nodes)
    if cycle is not None:
        assert len(set(cycle)) == len(cycle) >= 2
        for x, y in zip(cycle, cycle[1:] + cycle[:1]):
            assert y in graph[x]


def lend(rms, req_id, home, creditor, n):
    assert rms[home].move_kvcache(req_id, n, creditor)
    rms[home].advance_moves(lambda pairs: None, n)


def cycle_cluster(debts):
    """Instance i homes request i with 10 blocks, and lends per `debts` {(debtor, creditor): n}."""
    peers = {}
    rms = [RManager(i, 20, peers=peers, exclusive_roles=False) for i in range(3)]  # debts form cycles
    for i, rm in enumerate(rms):
        assert rm.alloc_prompt(i, 10)
    for (d, c), n in debts.items():
        lend(rms, d, d, c, n)
    gm = GManager(EngineConfig(gmanager=GManagerConfig(dgfm_min_blocks=2)))
    for rm in rms:
        gm.heartbeat(rm.heartbeat(InstanceStatus(rm.inst_id, 20, rm.num_free, rm.num_lendable, 1), full=True))
    return rms, gm


def test_swap_removes_the_cycle_and_keeps_block_counts():
    rms, gm = cycle_cluster({(0, 1): 3, (1, 2): 5, (2, 0): 4})
    used = [rm.pool.num_used for rm in rms]
    copied = []
    swap = gm.plan_dgfm(np.random.default_rng(0))
    assert swap is not None and swap.num_blocks == 3 and sorted(swap.cycle) == [0, 1, 2]
    assert gm.frozen == {0, 1, 2}
    assert gm.run_round() == []  # frozen entries: no recall or Algorithm 1 move touches them meanwhile
    execute_swap(swap, rms, copied.extend)
    gm.swap_done(swap)
    assert len(copied) == 9 and gm.frozen == set()
    assert gm.run_round() != []  # unfrozen: the debtors, which have room, recall again
    assert [rm.pool.num_used for rm in rms] == used
    assert {r: len(rm.tables[r]) for r, rm in enumerate(rms)} == {0: 10, 1: 10, 2: 10}
    placements = {r: {} for r in range(3)}
    for rm in rms:
        for r, n in rm.hosted.items():
            placements[r][rm.inst_id] = n
    graph = debt_graph(placements, {0: 0, 1: 1, 2: 2})
    assert graph == {1: {2: 2}, 2: {0: 1}}
    assert find_cycle(graph, [0, 1, 2]) is None


def test_a_swap_planned_before_a_request_finished_skips_it():
    """On Ray a swap reaches the instance after the heartbeat it was planned on: a request that finished since
    has nothing to bring home; the others of the cycle are still swapped and no block leaks."""
    rms, gm = cycle_cluster({(0, 1): 3, (1, 0): 3})
    swap = gm.plan_dgfm(np.random.default_rng(0))
    assert swap is not None and {r for r, *_ in swap.recalls} == {0, 1}
    rms[0].free_request(0)
    copied = []
    execute_swap(swap, rms, copied.extend)
    assert len(copied) == 3 and rms[0].hosted.get(1, 0) == 0 and rms[1].hosted[1] == 10  # request 1 all home
    assert [rm.pool.num_used for rm in rms] == [0, 10, 10]  # request 0 freed everywhere: nothing leaked (2 untouched)


def test_small_debts_are_not_swapped():
    rms, gm = cycle_cluster({(0, 1): 1, (1, 0): 4})
    assert gm.plan_dgfm(np.random.default_rng(0)) is None
