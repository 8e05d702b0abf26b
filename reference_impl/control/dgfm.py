"""DGFM (distkv-llm 4.5): find a directed cycle in the debt graph and cancel its smallest debt.

Edge X -> Y carries the rBlocks that requests homed on X hold on Y. On a cycle whose smallest debt m is at
least the block threshold, every X recalls m of its blocks from its successor at once: each instance frees
m blocks (its predecessor's) and takes m back (its own), so every instance's usage and every request's block
count stay the same, while the cycle's smallest edge disappears.
"""
from collections import defaultdict

import numpy as np

from reference_impl.control.protocol import Swap


def debt_graph(placements: dict[int, dict[int, int]], homes: dict[int, int]) -> dict[int, dict[int, int]]:
    """debtor -> {creditor: rBlocks}, from per-request placements {req_id: {inst_id: num_blocks}}."""
    graph: dict[int, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    for req_id, where in placements.items():
        home = homes.get(req_id)
        for inst_id, n in where.items():
            if home is not None and inst_id != home and n > 0:
                graph[home][inst_id] += n
    return {d: dict(cs) for d, cs in graph.items()}


def find_cycle(graph: dict[int, dict[int, int]], start_order) -> list[int] | None:
    """A directed cycle [v0, v1, ..., vk] (edge vk -> v0 closes it), searched from nodes in `start_order`."""
    done = set()
    for start in start_order:
        if start in done:
            continue
        path, on_path = [], {}
        stack = [(start, iter(sorted(graph.get(start, {}))))]
        path.append(start)
        on_path[start] = 0
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                stack.pop()
                path.pop()
                del on_path[node]
                done.add(node)
            elif child in on_path:
                return path[on_path[child]:]
            elif child not in done:
                on_path[child] = len(path)
                path.append(child)
                stack.append((child, iter(sorted(graph.get(child, {})))))
    return None


def count_cycles(graph: dict[int, dict[int, int]], min_blocks: int = 1) -> int:
    """Debt cycles DGFM could cancel now: find a cycle among debts >= min_blocks, cancel its smallest debt (as
    a swap would), repeat until none is left; the count of cancellations (deterministic: nodes in id order)."""
    g = _at_least(graph, min_blocks)
    count = 0
    while True:
        nodes = graph_nodes(g)
        cycle = find_cycle(g, nodes)
        if cycle is None:
            return count
        edges = list(zip(cycle, cycle[1:] + cycle[:1]))
        m = min(g[x][y] for x, y in edges)
        for x, y in edges:
            g[x][y] -= m
            if g[x][y] < max(1, min_blocks):
                del g[x][y]
        count += 1


def graph_nodes(graph: dict[int, dict[int, int]]) -> list[int]:
    return sorted(set(graph) | {c for cs in graph.values() for c in cs})


def cancellable_debts(placements: dict[int, dict[int, int]], homes: dict[int, int],
                      min_blocks: int) -> dict[int, dict[int, int]]:
    """The debt graph's edges of at least `min_blocks` rBlocks: the debts a swap may cancel."""
    return _at_least(debt_graph(placements, homes), min_blocks)


def _at_least(graph: dict[int, dict[int, int]], min_blocks: int) -> dict[int, dict[int, int]]:
    return {d: {c: n for c, n in cs.items() if n >= max(1, min_blocks)} for d, cs in graph.items()}


def plan_swap(graph: dict[int, dict[int, int]], placements: dict[int, dict[int, int]], homes: dict[int, int],
              rng: np.random.Generator) -> Swap | None:
    """The swap for one cycle of `graph` (cancellable_debts of `placements`), the search starting at a random
    node (one `rng.permutation` of the graph's nodes, drawn whenever it has any)."""
    nodes = graph_nodes(graph)
    if not nodes:
        return None
    cycle = find_cycle(graph, [nodes[i] for i in rng.permutation(len(nodes))])
    if cycle is None:
        return None
    edges = list(zip(cycle, cycle[1:] + cycle[:1]))
    m = min(graph[x][y] for x, y in edges)
    recalls = []
    for debtor, creditor in edges:
        left = m
        for req_id in sorted(placements):
            n = placements[req_id].get(creditor, 0) if homes.get(req_id) == debtor else 0
            if n and left:
                recalls.append((req_id, creditor, debtor, min(n, left)))
                left -= min(n, left)
    return Swap(tuple(cycle), m, tuple(recalls))


def execute_swap(swap: Swap, rmanagers, copy_blocks) -> None:
    """Carry a swap out on the rManagers at once: release every recalled block, then re-home them."""
    moved = []
    for req_id, creditor, home, n in swap.recalls:
        if req_id not in rmanagers[home].tables:  # finished since the plan's heartbeat: nothing to bring home
            continue
        table = rmanagers[home].tables[req_id]
        indexes = [i for i, b in enumerate(table) if b.inst_id == creditor][:n]
        rmanagers[creditor].release_blocks([table[i] for i in indexes])
        moved.append((home, req_id, indexes))
    pairs = []
    for home, req_id, indexes in moved:
        table = rmanagers[home].tables[req_id]
        for i in indexes:
            dst = rmanagers[home].alloc_for_swap(req_id)
            pairs.append((table[i], dst))
            rmanagers[home].set_block(req_id, i, dst)
    copy_blocks(pairs)
