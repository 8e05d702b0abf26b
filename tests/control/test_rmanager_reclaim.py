"""A home request short of room takes back space reserved for remote KV that has not arrived (infinite-llm 5.2:
a creditor short of local space reclaims what it lent); the source's move then ends early."""
from reference_impl.control.rmanager import RManager


def two_instances(capacity=10):
    peers = {}
    return RManager(0, capacity, 0, None, peers), RManager(1, capacity, 0, None, peers)


def test_admission_reclaims_an_idle_reservation_and_the_move_ends_early():
    src, dst = two_instances()
    assert src.alloc_prompt(7, 8)
    assert src.move_kvcache(7, 8, dst_inst=1)  # reserves 8 of dst's 10 blocks
    assert dst.num_free == 2 and dst.reserved == {7: 8}
    moved = []
    assert src.advance_moves(moved.extend, 2) == 2  # two blocks arrive, 6 still reserved
    assert dst.reserved == {7: 6} and dst.num_free == 2
    assert dst.alloc_prompt(9, 5)  # dst's own request: free 2 + 3 taken back from the reservation
    assert dst.reserved == {7: 3} and dst.num_free == 0 and len(dst.tables[9]) == 5
    assert src.advance_moves(moved.extend, 10) == 3  # what is still reserved arrives
    assert dst.reserved == {} and not src.moves
    assert dst.pool.num_used == 5 + 5 and dst.hosted[7] == 5 and src.hosted[7] == 3
    assert sorted(b.inst_id for b in src.tables[7]) == [0] * 3 + [1] * 5


def test_decode_growth_reclaims_one_block_and_own_recalls_are_kept():
    src, dst = two_instances(capacity=4)
    assert src.alloc_prompt(1, 2) and dst.alloc_prompt(2, 3)
    assert src.move_kvcache(1, 1, dst_inst=1)  # dst: 3 used, 1 reserved for request 1
    assert dst.num_free == 0
    assert dst.append_block(2) is not None and dst.reserved == {}
    moved = []
    assert src.advance_moves(moved.extend, 4) == 0 and not src.moves and not moved


def test_refused_when_even_the_reservations_would_not_make_room():
    src, dst = two_instances(capacity=4)
    assert src.alloc_prompt(1, 2) and src.move_kvcache(1, 2, dst_inst=1)
    assert not dst.alloc_prompt(3, 5)  # 4 free + reserved < 5, and no creditors to ask
    assert dst.reserved == {1: 2} and 3 not in dst.tables
