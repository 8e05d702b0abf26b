"""rManager / gManager protocol without tensors: random operation sequences keep the invariants."""
from hypothesis import HealthCheck, given, settings, strategies as st
from rm_cluster import FakeKV, check_invariants, make_cluster, send_heartbeats, status, true_ledger, true_map

from reference_impl.control.gmanager import GManager

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
