"""idle_waiting_frac: instance-time with no step running while a waiting request fit the free rBlocks."""
import math

from reference_impl.serving.records import FINISHED
from reference_impl.sim.config import with_engine
from reference_impl.systems.run import simulate
from reference_impl.systems.registry import cluster, system_config
from workloads.request import Request


def scenario():
    """Two one-request-at-a-time instances: r0 decodes long on instance 0; r1 (a bigger prompt, so r2 is sent
    to instance 0's queue, which has more free memory) is short on instance 1, which then sits idle while r2
    waits behind r0 although its memory could hold r2."""
    base = with_engine(cluster("llama2-7b", "A100-80GB-SXM", 2), max_batch_size=1)
    return base, [Request(0, 0.0, 1000, 400, "r0"), Request(1, 0.001, 20_000, 5, "r1"),
                  Request(2, 0.002, 1000, 10, "r2")]


def test_idle_waiting_frac_of_vllm_m_matches_the_idle_interval():
    base, requests = scenario()
    result = simulate(system_config("vllm-m", base), requests)
    r0, r1, r2 = result.requests
    assert [r.status for r in result.requests] == [FINISHED] * 3 and (r0.inst_id, r1.inst_id, r2.inst_id) == (0, 1, 0)
    # instance 1 idles from r1's end to r0's end (then r2 starts on instance 0); nothing else waits
    expected = (r0.finish_s - r1.finish_s) / (2 * (result.end_s - r0.arrival_s))
    assert expected > 0.01
    assert math.isclose(result.idle_waiting_frac, expected, rel_tol=0.02)


def test_infinite_llm_hands_the_waiting_request_to_the_idle_instance():
    base, requests = scenario()
    pooled = simulate(base, requests)
    alone = simulate(system_config("vllm-m", base), requests)
    assert all(r.status == FINISHED for r in pooled.requests)
    assert pooled.requests[2].inst_id == 1 and pooled.idle_waiting_frac < alone.idle_waiting_frac / 10
    assert pooled.requests[2].finish_s < alone.requests[2].finish_s


def test_creditors_waiting_for_others_are_parked_and_every_request_finishes(monkeypatch):
    """Requests larger than one instance on 4 instances: creditors whose first request needs borrowing are
    parked (a Handoff, not a step) while they lend; every request still finishes."""
    from reference_impl.sim import events

    handled = []
    handle = events.Handoff.handle
    monkeypatch.setattr(events.Handoff, "handle", lambda self, sim: handled.append(self) or handle(self, sim))
    base = cluster("llama2-7b", "A100-80GB-SXM", 4)
    requests = [Request(i, 0.5 * i, 150_000 if i % 2 else 30_000, 40, f"r{i}") for i in range(12)]
    result = simulate(base, requests)
    assert [r.status for r in result.requests] == [FINISHED] * len(requests)
    assert handled and result.num_moved_blocks > 0
