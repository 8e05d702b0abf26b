"""Infinite-llm 5.2 on the rManagers and schedulers: creditors reclaim, debtors retrieve, idle instances take
waiting work, and random workloads on 2-5 instances all finish (or are rejected with a reason)."""
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from reference_impl.control.engine import Engine, EngineConfig, GManagerConfig, step_clock
from reference_impl.errors import InputError
from reference_impl.control.rmanager import RManager
from reference_impl.control.scheduler import Scheduler
from reference_impl.control.sequence import Sequence, Status
from rm_cluster import check_invariants


class NullBackend:
    """Tokens are 0; KV copies are bookkeeping only."""

    def execute(self, instance, seqs, is_prefill):
        return [0] * len(seqs)

    def copy_blocks(self, pairs):
        pass


def cluster(*blocks):
    peers = {}
    return [RManager(i, n, 0, None, peers) for i, n in enumerate(blocks)]


def all_creditors(debtor, num_blocks):
    return [i for i in range(8) if i != debtor]  # a gManager hint naming every other instance


def finish_moves(rms):
    while any(rm.moves for rm in rms):
        for rm in rms:
            rm.advance_moves(lambda pairs: None, 4)


def test_reclaim_brings_blocks_home_then_to_another_creditor():
    debtor, creditor, other = cluster(4, 4, 4)
    assert debtor.alloc_prompt(1, 6, all_creditors)
    lender = creditor if creditor.num_lent else other
    spare = other if lender is creditor else creditor
    assert lender.num_lent == 2 and debtor.is_debtor and lender.is_creditor
    assert lender.reclaim_lent(2) == 2  # the debtor is full: the blocks go to the other creditor
    assert debtor.moves and all(m.src_inst == lender.inst_id for m in debtor.moves)
    finish_moves([debtor, creditor, other])
    assert lender.num_lent == 0 and spare.num_lent == 2 and not any(rm.reserved for rm in (debtor, creditor, other))
    assert sorted(debtor.holders(1).items()) == sorted({0: 4, spare.inst_id: 2}.items())
    check_invariants([debtor, creditor, other])


def test_reclaim_goes_home_first():
    debtor, creditor = cluster(4, 4)
    assert debtor.alloc_prompt(1, 2) and debtor.alloc_prompt(2, 4, all_creditors)  # request 2: 2 here, 2 lent
    debtor.free_request(1)  # room at home again
    assert creditor.reclaim_lent(2) == 2
    finish_moves([debtor, creditor])
    assert debtor.holders(2) == {0: 4} and creditor.num_lent == 0 and not debtor.is_debtor


def test_nothing_to_reclaim_anywhere_preempts_the_newest_request():
    debtor, creditor = cluster(4, 4)
    sched = Scheduler(creditor, block_size=4, max_batch_size=8, recommend=all_creditors)
    old, new = Sequence(10, list(range(8)), 8), Sequence(11, list(range(4)), 8)
    for seq in (old, new):
        sched.add(seq)
    assert sched.schedule()[0] == [old, new]  # prefill: 2 + 1 blocks of the creditor's 4
    assert debtor.alloc_prompt(1, 5, all_creditors) and creditor.num_lent == 1 and creditor.num_free == 0
    for seq in (old, new):  # both need a new block now
        seq.output_ids += [0] * 4
    scheduled, is_prefill = sched.schedule()
    # the debtor is full and there is no other creditor: the lent block stays, the newest request is recomputed
    assert not is_prefill and scheduled == [old] and new.status is Status.WAITING and new.num_preemptions == 1
    check_invariants([debtor, creditor])


def test_a_waiting_creditor_request_waits_for_reclaimed_room_without_preempting():
    debtor, creditor = cluster(4, 4)
    assert debtor.alloc_prompt(1, 2) and debtor.alloc_prompt(2, 4, all_creditors)  # 2 lent
    debtor.free_request(1)
    sched = Scheduler(creditor, block_size=4, max_batch_size=8, recommend=all_creditors)
    sched.add(Sequence(20, list(range(16)), 2))  # needs all 4 blocks of the creditor
    assert sched.schedule() == ([], False) and sched.is_head_blocked
    assert debtor.moves and creditor.num_lent == 2  # called back, on its way
    finish_moves([debtor, creditor])
    admitted, is_prefill = sched.schedule()
    assert is_prefill and [s.req_id for s in admitted] == [20] and creditor.holders(20) == {1: 4}


def test_a_creditor_does_not_call_back_room_for_a_request_larger_than_itself():
    """Reclaiming cannot make a request bigger than the instance fit there; it only shuffles the lent blocks
    to other creditors (whose reserved room then stops them borrowing in turn). The request waits for a
    borrower (fill_idle / redispatch) instead."""
    debtor, creditor, other = cluster(4, 4, 4)
    assert debtor.alloc_prompt(1, 6, all_creditors)
    lender = creditor if creditor.num_lent else other
    sched = Scheduler(lender, block_size=4, max_batch_size=8, recommend=all_creditors)
    sched.add(Sequence(20, list(range(20)), 2))  # 5 blocks: more than the lender's 4
    assert sched.schedule() == ([], False) and sched.is_head_blocked
    assert not debtor.moves and lender.num_lent == 2 and not any(rm.reserved for rm in (debtor, creditor, other))


def test_debtor_spends_room_from_a_retiring_request_on_retrieval_not_lending():
    debtor, creditor = cluster(4, 8)
    sched = Scheduler(debtor, block_size=4, max_batch_size=8, recommend=all_creditors)
    short, long_ = Sequence(1, list(range(8)), 1), Sequence(2, list(range(15)), 2)  # long_ never grows
    sched.add(short)
    sched.add(long_)
    assert sched.schedule()[0] == [short, long_] and debtor.num_borrowed == 2
    assert debtor.num_lendable == 0  # a debtor lends nothing
    sched.postprocess([short, long_], [0, 0])  # the short one retires: 2 blocks free at home
    sched.schedule()
    finish_moves([debtor, creditor])
    assert debtor.holders(2) == {0: 4} and creditor.num_lent == 0


def test_idle_instance_takes_the_waiting_request_that_fits():
    engine = Engine(EngineConfig(num_instances=2, blocks_per_instance=4, block_size=4).without_gmanager_rounds(),
                    NullBackend())
    busy, idle = engine.instances
    big, small = Sequence(1, list(range(28)), 4), Sequence(2, list(range(4)), 2)
    busy.scheduler.add(Sequence(0, list(range(12)), 50))
    busy.step(engine.backend)  # takes 3 of its 4 blocks
    busy.scheduler.add(big)  # needs 7 blocks: more than the cluster's 5 free
    busy.scheduler.add(small)
    busy.step(engine.backend)
    filled = engine.fill_idle()
    assert filled == [idle] and idle.scheduler.waiting[0] is small and list(busy.scheduler.waiting) == [big]


def test_an_idle_instance_does_not_take_a_request_another_idle_one_has_not_tried_yet():
    """Two idle instances, one just handed a request it has not stepped on: the other must leave it (taking
    it back and forth at one instant, with no step in between, never ends)."""
    engine = Engine(EngineConfig(num_instances=2, blocks_per_instance=4, block_size=4).without_gmanager_rounds(),
                    NullBackend())
    first, second = engine.instances
    seq = Sequence(1, list(range(8)), 2)  # 2 blocks: fits either instance
    second.scheduler.add_first(seq)  # what fill_idle or redispatch just did; second has not stepped yet
    assert not second.scheduler.is_head_blocked and not first.scheduler.waiting
    assert engine.fill_idle() == [] and list(second.scheduler.waiting) == [seq]
    second.scheduler.is_head_blocked = True  # second tried it and could not admit it: now first may take it
    assert engine.fill_idle() == [first] and list(first.scheduler.waiting) == [seq]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(num_instances=st.integers(2, 5), blocks=st.integers(3, 10), exclusive_roles=st.booleans(),
       interval=st.integers(0, 3), requests=st.lists(st.tuples(st.integers(1, 40), st.integers(1, 12)),
                                                      min_size=1, max_size=14))
def test_every_request_finishes_or_is_rejected_with_a_reason(num_instances, blocks, exclusive_roles, interval,
                                                               requests):
    config = EngineConfig(num_instances=num_instances, blocks_per_instance=blocks, block_size=4, max_batch_size=4,
                          gmanager=GManagerConfig(interval_s=interval or None), exclusive_roles=exclusive_roles)
    engine = Engine(config, NullBackend(), clock=step_clock())  # a round every `interval` steps
    accepted = []
    for i, (prompt_len, output_len) in enumerate(requests):
        seq = Sequence(i, list(range(prompt_len)), output_len)
        try:
            engine.add_request(seq)
            accepted.append(seq)
        except InputError as e:
            assert "rBlocks" in str(e)  # rejected, with the reason
            assert -(-(prompt_len + output_len) // 4) > blocks * num_instances  # ... only when it cannot fit
    engine.run(max_steps=5000, on_step=lambda e: check_invariants(list(e.rmanagers.values()), exclusive_roles))
    assert all(s.status is Status.FINISHED and len(s.output_ids) == s.max_new_tokens for s in accepted)
    assert all(rm.pool.num_used == 0 and not rm.reserved and not rm.moves for rm in engine.rmanagers.values())


def test_a_request_larger_than_its_instance_is_admitted_even_when_the_hint_is_stale():
    a, b, c = cluster(4, 4, 4)
    no_hint = lambda debtor, num_blocks: []  # heartbeats not heard yet: the gManager names no creditor
    assert a.alloc_prompt(1, 10, no_hint)  # it can never fit alone: fresh lendable room is used
    assert a.holders(1)[0] == 4 and sum(a.holders(1).values()) == 10
    # one that could fit an instance waits for the gManager's word instead of taking a creditor's room
    assert not a.alloc_prompt(2, 2, no_hint) and 2 not in a.tables
    assert a.alloc_prompt(2, 2, all_creditors)
    check_invariants([a, b, c])


@settings(max_examples=60, deadline=None)
@given(ops=st.lists(st.tuples(st.sampled_from(["add", "add_first", "take", "remove"]), st.integers(1, 30)),
                    max_size=40))
def test_the_queue_keeps_its_smallest_need_and_total(ops):
    """Scheduler.min_waiting_blocks (cached) and num_waiting_blocks equal a scan of the queue after every op."""
    sched = Scheduler(cluster(8)[0], block_size=4, max_batch_size=8, recommend=None)
    next_id = iter(range(10_000))
    for op, n in ops:
        if op in ("add", "add_first"):
            getattr(sched, op)(Sequence(next(next_id), list(range(n)), 1))
        elif sched.waiting and op == "take":
            sched.take_waiting(n % len(sched.waiting))
        elif sched.waiting:
            sched.remove_waiting(sched.waiting[n % len(sched.waiting)].req_id)
        needs = [-(-len(seq.prompt_ids) // 4) for seq in sched.waiting]
        assert sched.min_waiting_blocks == (min(needs) if needs else None)
        assert sched.num_waiting_blocks == sum(needs)


def test_a_creditor_that_waits_for_others_steps_without_effect():
    """Scheduler.waits_for_others (the simulator parks such instances instead of stepping them): a creditor
    whose first request is larger than itself can neither admit it nor call room back for it."""
    engine = Engine(EngineConfig(num_instances=3, blocks_per_instance=4, block_size=4).without_gmanager_rounds(),
                    NullBackend())
    debtor = engine.instances[0]
    debtor.scheduler.add(Sequence(0, list(range(24)), 50))  # 6 blocks: 2 borrowed
    debtor.step(engine.backend)
    lender = next(i for i in engine.instances if i.rm.num_lent)
    lender.scheduler.add(Sequence(1, list(range(20)), 2))  # 5 blocks: more than the lender's 4
    lender.step(engine.backend)
    assert lender.scheduler.waits_for_others

    def state():
        return [(i.rm.num_free, i.rm.num_lent, i.rm.num_reserved, len(i.rm.moves), len(i.scheduler.waiting),
                 len(i.scheduler.running)) for i in engine.instances]

    before = state()
    assert lender.step(engine.backend) == [] and state() == before
    debtor.scheduler.running[0].max_new_tokens = len(debtor.scheduler.running[0].output_ids) + 1
    debtor.step(engine.backend)  # the debtor's request ends: the lender holds nothing lent, may borrow again
    assert not lender.scheduler.waits_for_others


def _debtor_with_room():
    """Instance 0 holds request 2 (8 blocks: 4 here, 4 lent by instance 1) and has 4 free blocks that request 1
    freed when it retired (room it may spend on retrieval)."""
    engine = Engine(EngineConfig(num_instances=2, blocks_per_instance=8, block_size=4).without_gmanager_rounds(),
                    NullBackend())
    debtor, creditor = engine.instances
    debtor.scheduler.add(Sequence(1, list(range(16)), 1))  # 4 blocks, retires after its prefill
    debtor.scheduler.add(Sequence(2, list(range(32)), 50))  # 8 blocks: 4 borrowed
    engine.heartbeats()  # the gManager's creditor hint needs the instances' state
    debtor.step(engine.backend)
    assert debtor.rm.num_borrowed == 4 and debtor.rm.num_free == 4 and debtor.scheduler.num_retrievable == 4
    return engine, debtor, creditor


def test_a_debtor_retrieves_when_that_lets_its_creditor_admit_work():
    engine, debtor, creditor = _debtor_with_room()
    creditor.scheduler.add(Sequence(3, list(range(32)), 5))  # 8 blocks: fits the creditor once its room is back
    assert engine.retrieval_blocks(debtor, 4) == 4
    debtor.step(engine.backend)  # a decode step: the room goes to retrieval
    assert debtor.rm.moves and debtor.rm.moves[0].dst_inst == debtor.inst_id


def test_a_debtor_keeps_its_room_for_a_larger_batch_when_that_gains_more():
    engine, debtor, creditor = _debtor_with_room()
    debtor.scheduler.add(Sequence(3, list(range(16)), 5))  # 4 blocks: fits the debtor's free room
    assert engine.retrieval_blocks(debtor, 4) == 0


def test_a_debtor_leaves_its_blocks_on_an_idle_creditor():
    """Nothing waits anywhere: bringing blocks home only makes the debtor read more KV itself (Eq. 6), while the
    idle creditor gains nothing, so the model keeps them there (the old fixed rule would have retrieved)."""
    engine, debtor, _ = _debtor_with_room()
    assert engine.retrieval_blocks(debtor, 4) == 0
    debtor.step(engine.backend)
    assert not debtor.rm.moves and debtor.scheduler.num_retrievable == 0


@pytest.mark.parametrize("interval_s, pooling, rounds_at", [(2.5, True, [0.0, 3.0, 5.5]), (None, True, []),
                                                             (2.5, False, [])])
def test_gmanager_rounds_follow_the_engine_clock(interval_s, pooling, rounds_at):
    """A round at the first step, then at the first step at least `interval_s` after the last round; none without
    an interval or without pooling (the one cadence, GManagerConfig.interval_s, that every backend reads)."""
    times = iter([0.0, 1.0, 2.0, 3.0, 5.4, 5.5, 6.0, 7.9])
    now = [0.0]

    def clock():
        return now[0]
    config = EngineConfig(num_instances=2, blocks_per_instance=8, block_size=4, pooling=pooling,
                          gmanager=GManagerConfig(interval_s=interval_s))
    engine = Engine(config, NullBackend(), clock=clock)
    engine.add_request(Sequence(0, [1, 2, 3], 20))
    seen = []
    for now[0] in times:
        before = engine.num_rounds
        engine.step()
        if engine.num_rounds > before:
            seen.append(now[0])
    assert seen == rounds_at


def test_a_gmanager_interval_must_be_positive():
    with pytest.raises(InputError, match="gManager interval"):
        GManagerConfig(interval_s=0.0)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 6), blocks=st.integers(0, 12), cpu=st.integers(0, 4), lent=st.none() | st.integers(0, 12),
       pooling=st.booleans(), caps=st.lists(st.none() | st.integers(0, 12), min_size=6, max_size=6),
       homes=st.none() | st.sets(st.integers(0, 5), min_size=1))
def test_a_requests_room_is_its_home_plus_what_the_others_lend(n, blocks, cpu, lent, pooling, caps, homes):
    """EngineConfig.room_blocks against a direct count: with no design's rBlocks it is the one closed form; with them
    (Placement.blocks), the best home's own rBlocks plus each other instance's lending cap."""
    config = EngineConfig(num_instances=n, blocks_per_instance=blocks, cpu_blocks_per_instance=cpu,
                          max_lent_blocks=lent, pooling=pooling)
    assert config.room_blocks(lambda i: None) == config.room_blocks()
    own = [blocks + cpu if caps[i] is None else caps[i] + cpu for i in range(n)]
    cap = [min(own[i], (lent if lent is not None else own[i]) if caps[i] is None else caps[i]) for i in range(n)]
    rooms = [own[h] + (sum(cap) - cap[h] if pooling else 0) for h in range(n) if homes is None or h in homes]
    assert config.room_blocks(caps.__getitem__, homes) == max(rooms, default=0)
