"""Moving a running request whole (control/request_move.py): the KV and the Sequence change instance together, every
rBlock keeps one home, no token or block is lost, and a refused move changes nothing."""
from collections import Counter
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from reference_impl.control.engine_config import EngineConfig
from reference_impl.control.instance import Instance
from reference_impl.control.request_move import MoveRefused, move_request, refusal
from reference_impl.control.sequence import Sequence, Status
from rm_cluster import FakeKV

BLOCK = 4


def instances(*blocks, max_batch_size=8):
    """Instances of `blocks` rBlocks each, pooling off (a request's KV whole on one instance)."""
    peers, config = {}, EngineConfig(num_instances=len(blocks), block_size=BLOCK, max_batch_size=max_batch_size,
                                     pooling=False)
    return [Instance.build(i, replace(config, blocks_per_instance=n), None, peers=peers) for i, n in enumerate(blocks)]


def step(inst, kv):
    seqs, _ = inst.scheduler.schedule()
    kv.check_and_write([i.rm for i in kv.insts])
    return inst.scheduler.postprocess(seqs, [len(s.output_ids) + 1 for s in seqs])


def admit(inst, req_id, prompt_len, kv, max_new=8):
    seq = Sequence(req_id, list(range(prompt_len)), max_new)
    inst.scheduler.add(seq)
    step(inst, kv)
    return seq


def check_one_home(insts, seqs):
    """Each allocated rBlock is in exactly one table, of the request that owns it; a running request is in one
    batch and homed where that batch is; the tables hold every token so far; nothing is over its room."""
    tabled, owned = Counter(), Counter()
    for inst in insts:
        rm = inst.rm
        assert rm.num_free >= 0 and rm.pool.num_used + rm.pool.num_free == rm.pool.num_capacity
        owned.update((inst.inst_id, key) for key in rm.pool.owner)
        for req_id, table in rm.tables.items():
            for b in table:
                assert insts[b.inst_id].rm.pool.owner[(b.device, b.address)] == req_id
                tabled[(b.inst_id, (b.device, b.address))] += 1
    assert tabled == owned and all(n == 1 for n in tabled.values())
    for seq in seqs:
        homes = [i for i in insts if seq.req_id in i.rm.tables]
        batches = [i for i in insts if seq in i.scheduler.running]
        if seq.status is Status.RUNNING:
            assert len(homes) == 1 and batches == homes
            assert len(homes[0].rm.tables[seq.req_id]) * BLOCK >= seq.num_tokens - 1
        else:
            assert not homes and not batches


def test_move_rehomes_kv_and_batch():
    kv = FakeKV()
    src, dst = kv.insts = instances(6, 6)
    seq = admit(src, 1, 9, kv)  # 3 rBlocks
    step(src, kv)
    tokens, table = list(seq.token_ids), list(src.rm.tables[1])
    pairs = move_request(src, dst, seq, kv.copy)
    assert [s for s, _ in pairs] == table and all(d.inst_id == dst.inst_id for _, d in pairs)
    assert seq.token_ids == tokens and 1 not in src.rm.tables and src.rm.pool.num_used == 0
    assert dst.rm.holders(1) == {dst.inst_id: len(table)} and dst.scheduler.running == [seq]
    kv.check_and_write([i.rm for i in kv.insts])  # the KV came with it
    check_one_home(kv.insts, [seq])
    while seq.status is Status.RUNNING:  # it decodes on, at its new home
        step(dst, kv)
    assert len(seq.output_ids) == seq.max_new_tokens and dst.rm.pool.num_used == 0


def test_reserved_room_is_used_first():
    kv = FakeKV()
    src, dst = kv.insts = instances(6, 4)
    seq = admit(src, 1, 12, kv)  # 3 rBlocks
    assert dst.rm.try_move_kvcache(1, 3) and dst.rm.num_free == 1
    admit(dst, 2, 4, kv)  # takes the one free rBlock
    move_request(src, dst, seq, kv.copy)
    assert dst.rm.num_reserved_for(1) == 0 and dst.rm.num_free == 0
    check_one_home(kv.insts, [seq])


@pytest.mark.parametrize("case", ["no room", "batch full", "same", "not running", "spilled"])
def test_refused_move_changes_nothing(case):
    kv = FakeKV()
    src, dst = kv.insts = instances(6, 2 if case == "no room" else 8, max_batch_size=1)
    seq = admit(src, 1, 9, kv)
    target = src if case == "same" else dst
    if case == "batch full":
        admit(dst, 2, 2, kv)
    elif case == "not running":
        seq = Sequence(7, [0], 2)
    elif case == "spilled":  # a table naming another holder
        src.rm.tables[1][-1] = src.rm.tables[1][-1]._replace(inst_id=dst.inst_id)
        src.rm.holders_by_req[1] = dict(Counter(b.inst_id for b in src.rm.tables[1]))
    before = [(dict(i.rm.tables), dict(i.rm.reserved), list(i.scheduler.running), i.rm.pool.num_used) for i in kv.insts]
    assert refusal(src, target, seq) is not None
    with pytest.raises(MoveRefused):
        move_request(src, target, seq, kv.copy)
    assert before == [(dict(i.rm.tables), dict(i.rm.reserved), list(i.scheduler.running), i.rm.pool.num_used)
                      for i in kv.insts]


OPS = st.lists(st.tuples(st.sampled_from(["add", "step", "step", "reserve", "cancel", "move", "move"]),
                         st.integers(0, 5), st.integers(1, 12)), min_size=10, max_size=60)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS, blocks=st.lists(st.integers(2, 8), min_size=2, max_size=4))
def test_random_moves_keep_one_home_and_every_token(ops, blocks):
    kv = FakeKV()
    insts = kv.insts = instances(*blocks, max_batch_size=3)
    seqs, n = [], len(insts)
    for op, a, b in ops:
        running = [s for s in seqs if s.status is Status.RUNNING and not s.prefill_left]
        if op == "add":
            seqs.append(Sequence(len(seqs), list(range(b)), 1 + a))
            insts[a % n].scheduler.add(seqs[-1])
        elif op == "step":
            step(insts[a % n], kv)
        elif running:
            seq = running[a % len(running)]
            src = next(i for i in insts if seq.req_id in i.rm.tables)
            dst = insts[b % n]
            if op == "reserve":
                dst.rm.try_move_kvcache(seq.req_id, 1 + a % 3)
            elif op == "cancel":
                dst.rm.cancel_reservation(seq.req_id)
            else:
                tokens, num_blocks, why = list(seq.token_ids), len(src.rm.tables[seq.req_id]), refusal(src, dst, seq)
                if why is None:
                    move_request(src, dst, seq, kv.copy)
                    assert dst.rm.holders(seq.req_id) == {dst.inst_id: num_blocks}
                else:
                    with pytest.raises(MoveRefused):
                        move_request(src, dst, seq, kv.copy)
                assert seq.token_ids == tokens
        check_one_home(insts, seqs)
        kv.check_and_write([i.rm for i in insts])
    for inst in insts:  # reservations left for requests no longer here are room given back when cancelled
        for req_id in list(inst.rm.reserved):
            inst.rm.cancel_reservation(req_id)
    while any(i.has_work for i in insts):
        before = sum(len(s.output_ids) for s in seqs)
        for inst in insts:
            step(inst, kv)
        if sum(len(s.output_ids) for s in seqs) == before:
            break  # a request larger than its instance waits for good (no pooling)
    check_one_home(insts, seqs)
    assert all(len(s.output_ids) == s.max_new_tokens for s in seqs if s.status is Status.FINISHED)
