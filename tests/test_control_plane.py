"""rManager / gManager protocol without tensors: random operation sequences keep the invariants."""
from collections import Counter

from hypothesis import HealthCheck, given, settings, strategies as st

from reference_impl.gmanager import GManager, GManagerConfig
from reference_impl.protocol import InstanceStatus
from reference_impl.rmanager import RManager

NUM_INSTANCES = 3


def make_cluster(blocks, cap):
    peers = {}
    rms = [RManager(i, blocks[i], 1, max_lent_blocks=cap, peers=peers) for i in range(NUM_INSTANCES)]
    return rms, GManager(GManagerConfig(block_size=4, instances_per_node=2))


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


def check_invariants(rms):
    owners = Counter()
    for rm in rms:
        assert rm.pool.num_used + rm.pool.num_free == rm.pool.num_capacity
        assert rm.num_free >= 0
        assert rm.num_lent <= rm.max_lent_blocks
        held = Counter(rm.pool.owner.values())
        assert held == Counter({r: n for r, n in rm.hosted.items()})
        for key in rm.pool.owner:
            owners[(rm.inst_id, key)] += 1
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


def true_ledger(rms):
    homes = {r: rm.inst_id for rm in rms for r in rm.tables}
    ledger = {}
    for rm in rms:
        for req_id, n in rm.hosted.items():
            if homes[req_id] != rm.inst_id:
                ledger.setdefault(rm.inst_id, {}).setdefault(homes[req_id], 0)
                ledger[rm.inst_id][homes[req_id]] += n
    return ledger


ops = st.lists(st.tuples(st.sampled_from(["admit", "append", "free", "move", "recall", "advance", "heartbeat",
                                          "restart", "round", "dgfm"]),
                         st.integers(0, 50), st.integers(0, 6)), min_size=1, max_size=60)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=ops, blocks=st.lists(st.integers(1, 8), min_size=NUM_INSTANCES, max_size=NUM_INSTANCES),
       cap=st.integers(0, 6), seed=st.integers(0, 3))
def test_random_protocol_keeps_invariants(ops, blocks, cap, seed):
    import numpy as np
    from reference_impl.dgfm import execute_swap

    rms, gm = make_cluster(blocks, cap)
    rng = np.random.default_rng(seed)
    kv = FakeKV()
    next_req = 0
    for op, a, b in ops:
        live = sorted((r, rm) for rm in rms for r in rm.tables)
        if op == "admit":
            rm = rms[a % NUM_INSTANCES]
            ok = rm.alloc_prompt(next_req, b, gm.recommend_creditors)
            assert ok == (next_req in rm.tables)
            next_req += 1
        elif op in ("append", "free", "move", "recall") and live:
            req_id, rm = live[a % len(live)]
            if op == "append":
                total = sum(r.pool.num_capacity for r in rms)
                before = len(rm.tables[req_id])
                block = rm.append_block(req_id, gm.recommend_creditors)
                assert len(rm.tables[req_id]) == before + (block is not None)
                assert block is not None or before < total
            elif op == "free":
                rm.free_request(req_id)
            else:
                dst = rm.inst_id if op == "recall" else b % NUM_INSTANCES
                free_before = rms[dst].num_free
                if rm.move_kvcache(req_id, b, dst):
                    assert rms[dst].num_free < free_before
        elif op == "advance":
            for rm in rms:
                rm.advance_moves(kv.copy, max(1, b))
        elif op == "heartbeat":
            send_heartbeats(rms, gm)
        elif op == "restart":
            send_heartbeats(rms, gm)
            old_map = gm.placement_map()
            gm = GManager(gm.config)
            send_heartbeats(rms, gm, full=True)
            assert gm.placement_map() == old_map
        elif op == "round":
            send_heartbeats(rms, gm)
            homes = gm.homes()
            for move in gm.run_round():
                rms[homes[move.req_id]].move_kvcache(move.req_id, move.num_blocks, move.dst_inst)
        elif op == "dgfm":
            send_heartbeats(rms, gm)
            counts = {r: len(t) for rm in rms for r, t in rm.tables.items()}
            swap = gm.plan_dgfm(rng)
            if swap is not None:
                used = [rm.pool.num_used for rm in rms]
                execute_swap(swap, rms, kv.copy)
                gm.swap_done(swap)
                assert [rm.pool.num_used for rm in rms] == used
            assert counts == {r: len(t) for rm in rms for r, t in rm.tables.items()}
        check_invariants(rms)
        kv.check_and_write(rms)
    send_heartbeats(rms, gm)
    assert gm.ledger() == true_ledger(rms)
    expected = {r: tuple(sorted((e for rm in rms for e in rm.entries() if e.req_id == r), key=lambda e: e.inst_id))
                for r in sorted({e.req_id for rm in rms for e in rm.entries()})}
    assert gm.placement_map() == expected
    for rm in rms:
        for req_id in list(rm.tables):
            rm.free_request(req_id)
    for rm in rms:
        rm.moves.clear()
        assert rm.pool.num_free == rm.pool.num_capacity and not rm.hosted


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
