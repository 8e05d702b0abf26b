"""rManager / gManager protocol without tensors: random operation sequences keep the invariants."""
from collections import Counter

from hypothesis import HealthCheck, given, settings, strategies as st

from reference_impl.control.engine_config import EngineConfig, GManagerConfig
from reference_impl.control.gmanager import GManager
from reference_impl.control.protocol import InstanceStatus
from reference_impl.control.rmanager import RManager

NUM_INSTANCES = 3


def make_cluster(blocks, cap, exclusive_roles=True):
    peers = {}
    rms = [RManager(i, n, 1, max_lent_blocks=cap, peers=peers, exclusive_roles=exclusive_roles)
           for i, n in enumerate(blocks)]
    return rms, GManager(EngineConfig(block_size=4, exclusive_roles=exclusive_roles,
                                      gmanager=GManagerConfig(instances_per_node=2)))


def status(rm):
    return InstanceStatus(rm.inst_id, rm.pool.num_capacity, rm.num_free, rm.num_lendable, len(rm.tables))


def send_heartbeats(rms, gm, full=False):
    for rm in rms:
        gm.heartbeat(rm.heartbeat(status(rm), full=full))


def no_copy(pairs):
    pass


class FakeKV:
    """Block contents: each rBlock holds (req_id, logical index); copies read every source first."""

    def __init__(self):
        self.content = {}
        self.lengths = {}

    def copy(self, pairs):
        staged = [(dst, self.content.get((src.inst_id, src.device, src.address))) for src, dst in pairs]
        for dst, data in staged:
            self.content[(dst.inst_id, dst.device, dst.address)] = data

    def check_and_write(self, rms):
        tables = {r: t for rm in rms for r, t in rm.tables.items()}
        for req_id, table in tables.items():
            known = self.lengths.get(req_id, 0)
            for i, b in enumerate(table):
                key = (b.inst_id, b.device, b.address)
                if i < known:
                    assert self.content.get(key) == (req_id, i), "KV lost or corrupted by a move"
                else:
                    self.content[key] = (req_id, i)
        self.lengths = {r: len(t) for r, t in tables.items()}


def check_invariants(rms, exclusive_roles=True):
    owners = Counter()
    for rm in rms:
        assert rm.pool.num_used + rm.pool.num_free == rm.pool.num_capacity
        assert rm.num_free >= 0
        assert rm.num_lent <= rm.max_lent_blocks
        held = Counter(rm.pool.owner.values())
        assert held == Counter({r: n for r, n in rm.hosted.items()})
        for key in rm.pool.owner:
            owners[(rm.inst_id, key)] += 1
        for req_id, table in rm.tables.items():  # the holders index is the table, counted
            assert rm.holders(req_id) == Counter(b.inst_id for b in table)
        assert rm.num_borrowed == sum(b.inst_id != rm.inst_id for t in rm.tables.values() for b in t)
        assert rm.num_lent == sum(n for r, n in rm.hosted.items() if r not in rm.tables)
        assert rm.num_reserved == sum(rm.reserved.values()) and all(n > 0 for n in rm.reserved.values())
        if exclusive_roles:
            assert not (rm.is_debtor and rm.is_creditor), f"instance {rm.inst_id} borrows and lends at once"
    tabled = Counter()
    for rm in rms:
        for req_id, table in rm.tables.items():
            for b in table:
                tabled[(b.inst_id, (b.device, b.address))] += 1
                assert rms[b.inst_id].pool.owner[(b.device, b.address)] == req_id
    # every allocated block is in exactly one request's table, and every table block is allocated
    assert tabled == owners
    assert all(n == 1 for n in tabled.values())
    ids = [b.rblock_id for rm in rms for t in rm.tables.values() for b in t]
    assert len(ids) == len(set(ids))
    check_reservations(rms)
    check_move_cursors(rms)


def check_move_cursors(rms):
    """A move scans its request's table from its cursor: no block before it is one the move may take."""
    for rm in rms:
        for m in rm.moves:
            table = rm.tables[m.req_id]
            before = [b.inst_id for b in table[:m.cursor]]
            if m.src_inst == -1:  # a recall: any block not at home
                assert all(i in (rm.inst_id, m.dst_inst) for i in before), "a recall's cursor skips a remote block"
            else:
                assert m.src_inst not in before, "a move's cursor skips a block on its source"


def check_reservations(rms):
    """Every reservation is room promised to a pending move into that instance, at most what it still moves."""
    pending = Counter()
    for rm in rms:
        for m in rm.moves:
            assert m.req_id in rm.tables and m.num_blocks > 0
            pending[(m.req_id, m.dst_inst)] += m.num_blocks
    for rm in rms:
        for req_id, n in rm.reserved.items():
            assert n <= pending[(req_id, rm.inst_id)], f"reservation of {req_id} on {rm.inst_id} has no move"


def true_ledger(rms):
    homes = {r: rm.inst_id for rm in rms for r in rm.tables}
    ledger = {}
    for rm in rms:
        for req_id, n in rm.hosted.items():
            if homes[req_id] != rm.inst_id:
                ledger.setdefault(rm.inst_id, {}).setdefault(homes[req_id], 0)
                ledger[rm.inst_id][homes[req_id]] += n
    return ledger


def true_map(rms):
    return {r: tuple(sorted((e for rm in rms for e in rm.entries() if e.req_id == r), key=lambda e: e.inst_id))
            for r in sorted({e.req_id for rm in rms for e in rm.entries()})}


OPS = ["admit", "grow", "lend", "reclaim", "retrieve", "recall", "finish", "advance", "heartbeat", "restart",
       "round", "dgfm"]
WEIGHTED_OPS = OPS + ["admit", "admit", "grow", "lend", "lend", "advance"]  # states with debts come sooner
ops = st.lists(st.tuples(st.sampled_from(WEIGHTED_OPS), st.integers(0, 7), st.integers(0, 8)), min_size=20,
               max_size=80)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=ops, blocks=st.lists(st.integers(2, 8), min_size=2, max_size=5), cap=st.integers(0, 6),
       seed=st.integers(0, 3), exclusive_roles=st.booleans(), fresh_map=st.booleans())
def test_random_protocol_keeps_invariants(ops, blocks, cap, seed, exclusive_roles, fresh_map):
    """`fresh_map`: heartbeats after every operation and the gManager's map checked each time; else the
    gManager hears only on heartbeat operations (stale hints) and is checked then."""
    import numpy as np
    from reference_impl.control.dgfm import execute_swap

    rms, gm = make_cluster(blocks, cap, exclusive_roles)
    n = len(rms)
    rng = np.random.default_rng(seed)
    kv = FakeKV()
    next_req = 0
    for op, a, b in ops:
        live = sorted((r, rm) for rm in rms for r in rm.tables)
        if op == "admit":
            rm = rms[a % n]
            ok = rm.alloc_prompt(next_req, b, gm.recommend_creditors)
            assert ok == (next_req in rm.tables)
            assert ok or b > rm.num_free  # refused only when short of local room
            next_req += 1
        elif op in ("reclaim", "retrieve"):
            rm = rms[a % n]
            moves_before = sum(len(r.moves) for r in rms)
            if op == "reclaim":
                leaving = rm.reclaim_lent(b)
                assert 0 <= leaving <= rm.num_lent
                assert leaving == 0 or sum(len(r.moves) for r in rms) >= 1
            else:
                asked = rm.retrieve(b)
                assert 0 <= asked <= min(b, rm.num_borrowed)
                assert sum(len(r.moves) for r in rms) >= moves_before
        elif op in ("grow", "finish", "lend", "recall") and live:
            req_id, rm = live[a % len(live)]
            if op == "grow":
                before = len(rm.tables[req_id])
                block = rm.append_block(req_id, gm.recommend_creditors)
                assert len(rm.tables[req_id]) == before + (block is not None)
                # refused only when no instance may give a block: none free here, and none lendable elsewhere
                # (or this instance may not borrow: it lends under exclusive roles)
                assert block is not None or rm.num_free == 0 and (
                    not rm.can_borrow or all(p.num_lendable == 0 for p in rms if p is not rm))
            elif op == "finish":
                rm.free_request(req_id)
                assert all(req_id not in r.reserved and req_id not in r.hosted for r in rms)
            else:
                dst = rm.inst_id if op == "recall" else b % n
                free_before = rms[dst].num_free
                if rm.move_kvcache(req_id, b, dst):
                    assert rms[dst].num_free < free_before
        elif op == "advance":
            for rm in rms:
                rm.advance_moves(kv.copy, max(1, b))
        elif op == "restart":
            send_heartbeats(rms, gm)
            old_map = gm.placement_map()
            gm = GManager(gm.config)
            send_heartbeats(rms, gm, full=True)
            assert gm.placement_map() == old_map
        elif op == "round":
            send_heartbeats(rms, gm)
            homes = gm.homes()
            fresh = GManager(gm.config)  # no memo: the round computed from the same map
            fresh.entries, fresh.status, fresh.frozen = dict(gm.entries), dict(gm.status), set(gm.frozen)
            planned = gm.run_round()
            assert planned == fresh.run_round()
            for move in planned:
                rms[homes[move.req_id]].move_kvcache(move.req_id, move.num_blocks, move.dst_inst)
        elif op == "dgfm":
            send_heartbeats(rms, gm)
            counts = {r: len(t) for rm in rms for r, t in rm.tables.items()}
            swap = gm.plan_dgfm(rng)
            if swap is not None:
                assert not exclusive_roles  # exclusive roles leave no debt cycle to swap
                used = [rm.pool.num_used for rm in rms]
                execute_swap(swap, rms, kv.copy)
                gm.swap_done(swap)
                assert [rm.pool.num_used for rm in rms] == used
            assert counts == {r: len(t) for rm in rms for r, t in rm.tables.items()}
        check_invariants(rms, exclusive_roles)
        kv.check_and_write(rms)
        if fresh_map or op == "heartbeat":
            send_heartbeats(rms, gm)
            assert gm.placement_map() == true_map(rms)
            assert gm.ledger() == true_ledger(rms)
    for _ in range(200):  # every pending move ends, and its reservation with it
        if not any(rm.moves for rm in rms):
            break
        for rm in rms:
            rm.advance_moves(kv.copy, 1)
        check_invariants(rms, exclusive_roles)
        kv.check_and_write(rms)
    assert not any(rm.moves for rm in rms) and not any(rm.reserved for rm in rms)
    for rm in rms:
        for req_id in list(rm.tables):
            rm.free_request(req_id)
    for rm in rms:
        assert rm.pool.num_free == rm.pool.num_capacity and not rm.hosted and not rm.reserved and not rm.moves


def test_refused_move_when_destination_short():
    rms, gm = make_cluster([4, 4, 4], cap=2)
    assert rms[0].alloc_prompt(1, 4)
    assert not rms[0].move_kvcache(1, 3, 1)  # over the lending cap of 2
    assert rms[0].move_kvcache(1, 2, 1)
    assert rms[2].alloc_prompt(2, 2)
    assert not rms[2].move_kvcache(2, 1, 1)  # instance 1's cap is taken by the first reservation (FCFS)
    assert rms[0].advance_moves(no_copy, 1) == 1 and rms[0].advance_moves(no_copy, 5) == 1
    assert [b.inst_id for b in rms[0].tables[1]] == [1, 1, 0, 0]
    check_invariants(rms)


def test_recall_and_move_out_in_one_chunk_do_not_chain_copies():
    rms, gm = make_cluster([4, 4, 4], cap=4)
    kv = FakeKV()
    assert rms[0].alloc_prompt(1, 3)
    kv.check_and_write(rms)
    assert rms[0].move_kvcache(1, 1, 1)
    rms[0].advance_moves(kv.copy, 4)
    assert rms[0].append_block(1) is not None  # takes the freed address, so the recall lands on a fresh one
    kv.check_and_write(rms)
    assert rms[0].move_kvcache(1, 1, 0)  # recall the block on instance 1 ...
    assert rms[0].move_kvcache(1, 2, 2)  # ... while pushing local ones to instance 2
    while rms[0].moves:
        rms[0].advance_moves(kv.copy, 4)
    kv.check_and_write(rms)
    check_invariants(rms)


def test_a_block_put_back_on_a_moves_source_is_taken_first():
    """A move takes its request's blocks in table order; one put back on its source behind the move's scan
    (a swap, a recall) is the next it takes."""
    rms, gm = make_cluster([8, 8, 8], cap=8)
    home = rms[0]
    assert home.alloc_prompt(7, 6, gm.recommend_creditors)
    assert home.move_kvcache(7, 4, 2)
    for _ in range(2):
        home.advance_moves(no_copy, 1)
    assert [b.inst_id for b in home.tables[7]] == [2, 2, 0, 0, 0, 0]
    back = home.alloc_for_swap(7)  # logical block 0 comes home
    rms[2].release(home.tables[7][0])
    home.set_block(7, 0, back)
    check_move_cursors(rms)
    home.advance_moves(no_copy, 1)
    assert [b.inst_id for b in home.tables[7]] == [2, 2, 0, 0, 0, 0]
    check_invariants(rms)


def test_admissible_room_reads_a_peer_in_another_process_afresh():
    """The peers' lendable room is memoised only when the rManagers share an engine's change counts; without them
    (a Ray actor's rManager, whose peers change in other processes) it is read afresh."""

    class OtherProcess:
        num_lendable = 0

    peers = {}
    rm, remote = RManager(0, 4, peers=peers), OtherProcess()
    peers[1] = remote
    assert rm.num_admissible(pooled=True) == 4
    remote.num_lendable = 5
    assert rm.num_admissible(pooled=True) == 9
    local = RManager(2, 3, peers=peers)
    assert rm.num_admissible(pooled=True) == 12 and local.num_admissible(pooled=True) == 3 + 4 + 5


class CountingTakes:
    """Peer rManager `rm` whose take_reserved calls are counted; `short` blocks fewer than asked are handed out
    once (a peer in another process that took room back since the home last heard)."""

    def __init__(self, rm, short=0):
        self.rm, self.calls, self.short = rm, [], short

    def __getattr__(self, name):
        return getattr(self.rm, name)

    def take_reserved(self, req_id, num_blocks=1):
        self.calls.append(num_blocks)
        give, self.short = num_blocks - self.short, 0
        self.rm.cancel_reservation(req_id, num_blocks - give)
        return self.rm.take_reserved(req_id, give) if give > 0 else []


def test_a_chunk_of_a_move_takes_its_blocks_from_the_destination_in_one_call():
    rms, gm = make_cluster([8, 8, 8], cap=8)
    dst = CountingTakes(rms[1])
    rms[0].peers[1] = dst
    assert rms[0].alloc_prompt(1, 6)
    assert rms[0].move_kvcache(1, 5, 1)
    assert rms[0].advance_moves(no_copy, 3) == 3 and rms[0].advance_moves(no_copy, 8) == 2
    assert dst.calls == [3, 2]  # one round trip per chunk, not one per block
    rms[0].peers[1] = rms[1]
    assert [b.inst_id for b in rms[0].tables[1]] == [1] * 5 + [0] and not rms[0].moves
    check_invariants(rms)


def test_a_destination_handing_out_fewer_blocks_ends_the_move_with_those_moved():
    rms, gm = make_cluster([8, 8, 8], cap=8)
    kv = FakeKV()
    assert rms[0].alloc_prompt(1, 6)
    kv.check_and_write(rms)
    dst = CountingTakes(rms[1], short=2)
    rms[0].peers[1] = dst
    assert rms[0].move_kvcache(1, 4, 1)
    assert rms[0].advance_moves(kv.copy, 8) == 2 and dst.calls == [4]
    rms[0].peers[1] = rms[1]
    assert not rms[0].moves and rms[1].num_reserved_for(1) == 0
    assert [b.inst_id for b in rms[0].tables[1]] == [1, 1, 0, 0, 0, 0]
    kv.check_and_write(rms)
    check_invariants(rms)


def test_borrow_reserves_and_takes_at_once_or_not_at_all():
    rms, gm = make_cluster([4, 4], cap=3)
    assert rms[0].alloc_prompt(1, 4)
    assert rms[1].borrow(1, 4) == []  # over the lending cap: nothing reserved, nothing taken
    assert rms[1].num_reserved_for(1) == 0 and rms[1].num_lendable == 3
    rms[1].note_home(1, 0)
    blocks = rms[1].borrow(1, 3)
    assert [b.inst_id for b in blocks] == [1, 1, 1] and rms[1].num_reserved_for(1) == 0
    assert rms[1].num_lendable == 0 and rms[1].hosted[1] == 3
