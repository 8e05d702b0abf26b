"""The task graph of a sweep as it ran: each point a node with its CPU seconds and the points it waited for.

What a coroutine has waited for is carried in a context variable: a point awaited in a coroutine becomes that
coroutine's frontier; `gather` starts each child from its parent's frontier and hands their frontiers back to the
parent when all are done (`start` and `join` likewise, for a coroutine run ahead of being awaited); `after(points)`
adds points awaited by other means (a future another coroutine filled).
A point submitted depends on the frontier of the coroutine that submitted it. The benchmark (repro bench sweep)
schedules such a graph on N cores.
"""
import asyncio
import contextvars
from dataclasses import asdict, dataclass, field

_FRONTIER = contextvars.ContextVar("sweep_frontier", default=frozenset())
_EXPERIMENT = contextvars.ContextVar("sweep_experiment", default="")


async def as_experiment(name: str, coro):
    """`coro` awaited with the points it submits counted as experiment `name`'s (several on one sweep)."""
    _EXPERIMENT.set(name)
    return await coro


@dataclass(slots=True)
class Node:
    id: int
    experiment: str
    label: str
    system: str
    rate_per_s: float
    seed: int
    cpu_s: float  # CPU seconds of the simulation where it ran (stored points: when it was run)
    how: str  # run | stored | shared | known (answered from points already known: nothing to run)
    after: list = field(default_factory=list)  # ids of the nodes it waited for


class TaskGraph:
    def __init__(self, experiment: str = ""):
        self.experiment = experiment
        self.nodes: list[Node] = []
        self._node_of: dict[int, int] = {}  # id(point dict) -> node id

    def add(self, label: str, system: str, rate_per_s: float, seed: int, how: str) -> Node:
        node = Node(len(self.nodes), _EXPERIMENT.get() or self.experiment, label, system, rate_per_s, seed, 0.0, how,
                    sorted(_FRONTIER.get()))
        self.nodes.append(node)
        return node

    def done(self, node: Node, result, cpu_s: float) -> None:
        """`result` of `node` is what the awaiting coroutine now has seen."""
        node.cpu_s = cpu_s
        self._node_of[id(result)] = node.id
        _FRONTIER.set(frozenset({node.id}))

    def after(self, points) -> None:
        """The current coroutine has also seen `points` (e.g. read from another coroutine's group)."""
        ids = {self._node_of[id(p)] for p in points if id(p) in self._node_of}
        _FRONTIER.set(_FRONTIER.get() | ids)

    async def gather(self, *coros) -> list:
        """asyncio.gather that merges the children's frontiers into the caller's."""
        async def child(coro):
            result = await coro
            return result, _FRONTIER.get()

        done = await asyncio.gather(*(child(c) for c in coros))
        if done:  # each child's frontier is its parent's or what followed from it
            _FRONTIER.set(frozenset().union(*(f for _, f in done)))
        return [r for r, _ in done]

    def start(self, coro) -> asyncio.Task:
        """`coro` started now, on its own (what it submits depends on the current frontier); `join` awaits it."""
        async def child():
            result = await coro
            return result, _FRONTIER.get()

        return asyncio.ensure_future(child())

    async def join(self, task: asyncio.Task):
        """The result of a `start`ed task, its frontier merged into the caller's."""
        result, frontier = await task
        _FRONTIER.set(_FRONTIER.get() | frontier)
        return result

    def to_json(self) -> list[dict]:
        return [asdict(n) for n in self.nodes]
