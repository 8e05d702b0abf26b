"""The indexes that keep an event's cost independent of the cluster (control/indexes.py) answer what a scan answers:
random updates against brute force; and in a run with borrowing and moves, each request goes where the dispatch
rule over every instance sends it and the simulator wakes exactly the instances a scan would."""
from hypothesis import given, settings, strategies as st

from reference_impl.control.engine import Engine
from reference_impl.control.indexes import INF, KeyHeap, MinTree
from reference_impl.serving.records import FINISHED
from reference_impl.sim.events import MAX_NOOP_STEPS_PER_INSTANT, Handoff, Step
from reference_impl.sim.simulator import Simulator
from reference_impl.systems.run import simulate
from reference_impl.systems.registry import cluster
from workloads.request import Request

updates = st.lists(st.tuples(st.integers(0, 40), st.one_of(st.none(), st.integers(0, 6)), st.integers(0, 2)),
                   max_size=300)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 41), updates)
def test_key_heap_gives_the_smallest_key_and_all_keys_in_order(n, ops):
    heap, keys = KeyHeap(n), [None] * n
    for i, a, b in ops:
        i %= n
        keys[i] = None if a is None else (a, b, i)
        heap.set(i, keys[i])
        live = sorted(k for k in keys if k is not None)
        assert heap.top() == (live[0] if live else None)
    assert list(heap.in_order()) == sorted(k for k in keys if k is not None)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 41), updates, st.integers(0, 45), st.integers(-1, 7))
def test_min_tree_finds_the_first_value_at_most_a_bound(n, ops, start, bound):
    tree, values = MinTree(n), [INF] * n
    for i, a, _ in ops:
        values[i % n] = INF if a is None else a
        tree.set(i % n, values[i % n])
    assert tree.first_at_most(start, bound) == next((i for i in range(start, n) if values[i] <= bound), None)
    assert tree.min() == min(values)


def test_dispatch_and_wake_all_match_a_scan_over_every_instance(monkeypatch):
    add_request, wake_all = Engine.add_request, Simulator.wake_all
    checked = {"dispatch": 0, "wake_all": 0}

    def checked_add_request(engine, seq):
        expected = max(engine.instances, key=lambda i: (i.rm.num_free - i.scheduler.num_waiting_blocks,
                                                         -len(i.scheduler.running), -i.inst_id))
        inst_id = add_request(engine, seq)
        assert inst_id == expected.inst_id
        checked["dispatch"] += 1
        return inst_id

    def checked_wake_all(sim, time_s):
        steps, parked = [], []  # what a scan over every instance in id order wakes and parks
        for inst in sim.engine.instances:
            i, s = inst.inst_id, inst.scheduler
            if sim.busy[i] or not inst.has_work:
                continue
            if not s.running and s.waits_for_others and not sim.backend.pending[i].sent_tokens:
                parked.append(i)
            elif sim.noop_steps[i] != (time_s, MAX_NOOP_STEPS_PER_INSTANT):
                steps.append(i)
        caused = wake_all(sim, time_s)
        assert [e.inst_id for e in caused if isinstance(e, Step)] == steps
        assert [e.inst_ids for e in caused if isinstance(e, Handoff)] == ([tuple(parked)] if parked else [])
        checked["wake_all"] += 1
        return caused

    monkeypatch.setattr(Engine, "add_request", checked_add_request)
    monkeypatch.setattr(Simulator, "wake_all", checked_wake_all)
    base = cluster("llama2-7b", "A100-80GB-SXM", 8)
    requests = [Request(i, 0.2 * i, 150_000 if i % 5 == 0 else 3_000 + 700 * i, 60, f"r{i}") for i in range(40)]
    result = simulate(base, requests)
    assert [r.status for r in result.requests] == [FINISHED] * len(requests)
    assert result.num_moved_blocks > 0 and checked["dispatch"] == len(requests) and checked["wake_all"] > 10
