"""KV moves between rManagers without tensors: refusals, recalls, chunks and reservations keep the invariants."""
from rm_cluster import FakeKV, check_invariants, check_move_cursors, make_cluster, no_copy

from reference_impl.control.rmanager import RManager


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
