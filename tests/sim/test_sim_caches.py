"""The engine's shortcuts are exact: a heartbeat left unsent, a memoized round, and reads memoised while the
engine's count of memory changes stands give what computing afresh gives, at every round of a run with moves and
parked work; a fill_idle or a Handoff that finds nothing to do (afresh or because nothing changed since one that
found nothing) leaves nothing it could have done. Read through public state only."""
from reference_impl.control.engine import Engine
from reference_impl.control.gmanager import GManager
from reference_impl.control.sequence import num_blocks_for
from reference_impl.serving.records import FINISHED
from reference_impl.systems.run import simulate
from reference_impl.systems.registry import cluster
from workloads.request import Request


def test_the_gmanager_and_the_cached_reads_match_a_fresh_look(monkeypatch):
    seen = {"rounds": 0, "heartbeats": 0, "instances": 0}
    heartbeats, heartbeat = Engine.heartbeats, GManager.heartbeat

    def counted_heartbeat(gm, hb):
        seen["heartbeats"] += 1
        heartbeat(gm, hb)

    def checked_heartbeats(engine, full=False):
        heartbeats(engine, full)
        gm, instances = engine.gmanager, engine.instances
        assert all(gm.status[i.inst_id] == i.status() for i in instances)
        assert gm.entries == {(e.req_id, e.inst_id): e for i in instances for e in i.rm.entries()}
        lendable = [i.rm.num_lendable for i in instances]
        room = engine.room()
        assert (room.lendable, room.total_lendable) == (lendable, sum(lendable))
        for i in instances:
            fresh = i.rm.num_admissible(True, sum(lendable) - lendable[i.inst_id])
            assert room.pooled_room(i) == fresh == i.rm.num_admissible(True)
            assert fresh <= engine.most_pooled_room()  # the bound that ends admission checks early
        assert engine.num_free() == sum(i.rm.num_free for i in instances)
        needs = [n for i in instances if (n := i.scheduler.min_waiting_blocks) is not None]
        assert engine.min_waiting_blocks() == (min(needs) if needs else None)
        free = sorted((i for i in instances if not i.scheduler.waiting
                       and len(i.scheduler.running) < i.scheduler.max_batch_size),
                      key=lambda i: (-i.rm.num_free, i.inst_id))
        assert engine.pool_targets() == free
        seen["rounds"] += 1
        seen["instances"] += len(instances)

    monkeypatch.setattr(Engine, "heartbeats", checked_heartbeats)
    monkeypatch.setattr(GManager, "heartbeat", counted_heartbeat)
    base = cluster("llama2-7b", "A100-80GB-SXM", 4)
    requests = [Request(i, 0.5 * i, 150_000 if i % 2 else 30_000, 40, f"r{i}") for i in range(12)]
    result = simulate(base, requests)
    assert [r.status for r in result.requests] == [FINISHED] * len(requests)
    assert result.num_moved_blocks > 0 and seen["rounds"] > 10
    assert seen["heartbeats"] < seen["instances"]  # some were left unsent: the check above covered them


def test_a_memoized_round_plans_what_a_fresh_gmanager_plans(monkeypatch):
    run_round = GManager.run_round
    memo_hits, planned_at = [], {}  # a round on the version of the last one is the memoized one

    def checked_round(gm):
        hit = planned_at.get(id(gm)) == gm.version
        planned_at[id(gm)] = gm.version
        fresh = GManager(gm.config, gm.perf_model)
        fresh.entries, fresh.status, fresh.frozen = dict(gm.entries), dict(gm.status), set(gm.frozen)
        planned = run_round(gm)
        assert planned == run_round(fresh)
        memo_hits.append(hit)
        return planned

    monkeypatch.setattr(GManager, "run_round", checked_round)
    base = cluster("llama2-7b", "A100-80GB-SXM", 4)
    requests = [Request(i, 3.0 * i, 40_000 if i % 3 else 120_000, 300, f"r{i}") for i in range(6)]
    result = simulate(base, requests)
    assert all(r.status == FINISHED for r in result.requests)
    assert any(memo_hits) and not all(memo_hits)


def nothing_to_fill(engine) -> bool:
    """No instance that runs nothing, and whose first waiting request (if any) was refused, could take a waiting
    request that fits its pooled room now (an idle instance's untried first request excepted): what fill_idle
    promises when it hands nothing over."""
    if not engine.config.pooling:
        return True
    room, bs = engine.room(), engine.config.block_size
    for inst in engine.instances:
        s = inst.scheduler
        if s.running or (s.waiting and not s.is_head_blocked):
            continue
        for other in engine.instances:
            o = other.scheduler
            start = 1 if other is not inst and not o.running and not o.is_head_blocked else 0
            if any(num_blocks_for(seq.num_tokens, bs) <= room.pooled_room(inst) for seq in list(o.waiting)[start:]):
                return False
    return True


def could_redispatch(engine, inst) -> bool:
    """`inst`'s refused first request fits the pooled room of an instance that may take it (Engine.redispatch)."""
    s = inst.scheduler
    if not (engine.config.pooling and s.waiting and s.is_head_blocked):
        return False
    room = engine.room()
    return any(o is not inst and s.head_blocks <= room.pooled_room(o) for o in engine.pool_targets())


def test_fill_idle_and_handoff_that_find_nothing_leave_nothing_to_do(monkeypatch):
    """Engine.fill_idle and events.Handoff skip their work when memory and queues did not change since they
    last found nothing to do; whenever they find nothing, skipped or not, there was nothing to do."""
    from reference_impl.sim import events

    found_nothing, skipped = {}, {"fill_idle": 0, "handoff": 0}
    fill_idle, handoff = Engine.fill_idle, events.Handoff.handle

    def checked_fill_idle(engine):
        key = (engine.changes.memory, engine.changes.queues)
        filled = fill_idle(engine)
        if not filled:
            skipped["fill_idle"] += found_nothing.get("fill_idle") == key
            found_nothing["fill_idle"] = key
            assert nothing_to_fill(engine)
        return filled

    def checked_handoff(event, sim):
        key = (sim.changes.memory, sim.changes.queues, event.inst_ids)
        caused = handoff(event, sim)
        if not caused:
            skipped["handoff"] += found_nothing.get("handoff") == key
            found_nothing["handoff"] = key
            engine = sim.engine
            parked = [engine.instances[i] for i in event.inst_ids]
            assert not any(could_redispatch(engine, i) for i in parked if i.scheduler.waits_for_others)
            assert nothing_to_fill(engine)
        return caused

    monkeypatch.setattr(Engine, "fill_idle", checked_fill_idle)
    monkeypatch.setattr(events.Handoff, "handle", checked_handoff)
    base = cluster("llama2-7b", "A100-80GB-SXM", 4)
    requests = [Request(i, 0.5 * i, 150_000 if i % 2 else 30_000, 40, f"r{i}") for i in range(12)]
    result = simulate(base, requests)
    assert [r.status for r in result.requests] == [FINISHED] * len(requests)
    assert skipped["fill_idle"] > 0 and skipped["handoff"] > 0
