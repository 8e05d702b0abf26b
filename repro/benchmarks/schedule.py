"""A sweep's task graph (repro/serving/task_graph.py) on N cores: list scheduling as the sweep hands out points
(whenever a core frees, the longest ready point first), the critical path, and the bounds any schedule meets
(the critical path, and the total CPU over N)."""
import heapq


def schedule_s(costs: list[float], after: list[list[int]], cores: int) -> float:
    """Wall seconds of list scheduling `costs` (node i waits for the nodes in after[i]) on `cores` cores."""
    waiting = [len(set(a)) for a in after]
    users = [[] for _ in costs]
    for i, deps in enumerate(after):
        for d in set(deps):
            users[d].append(i)
    ready = [(-costs[i], i) for i, n in enumerate(waiting) if n == 0]
    heapq.heapify(ready)
    running, now, free, done = [], 0.0, cores, 0
    while done < len(costs):
        while ready and free:
            _, i = heapq.heappop(ready)
            heapq.heappush(running, (now + costs[i], i))
            free -= 1
        if not running:
            raise ValueError("the graph has a cycle")
        now, i = heapq.heappop(running)
        free, done = free + 1, done + 1
        for u in users[i]:
            waiting[u] -= 1
            if waiting[u] == 0:
                heapq.heappush(ready, (-costs[u], u))
    return now


def critical_path(costs: list[float], after: list[list[int]]) -> tuple[float, list[int]]:
    """(seconds, nodes) of the longest chain; nodes must be numbered so that each waits only for lower numbers."""
    finish, via = [0.0] * len(costs), [None] * len(costs)
    for i, deps in enumerate(after):
        if any(d >= i for d in deps):
            raise ValueError(f"node {i} waits for a later node")
        best = max(deps, key=lambda d: finish[d], default=None)
        via[i] = best
        finish[i] = costs[i] + (finish[best] if best is not None else 0.0)
    if not costs:
        return 0.0, []
    end = max(range(len(costs)), key=lambda i: finish[i])
    path = [end]
    while via[path[-1]] is not None:
        path.append(via[path[-1]])
    return finish[end], path[::-1]
