"""The driver's count of what it sent an instance and the instance has not taken in: right against a plain list of
every request sent (the reference), and bounded however many requests a long-serving driver sends."""
from hypothesis import given, strategies as st

from reference_impl.backends.ray.snapshot import Dispatched


@given(st.lists(st.tuples(st.integers(1, 9), st.integers(0, 3)), max_size=60))
def test_unseen_blocks_equal_the_list_of_every_request(events):
    sent, every, num_added = Dispatched(), [], 0
    for blocks, taken_in in events:
        sent.add(blocks)
        every.append(blocks)
        num_added = min(len(every), num_added + taken_in)  # the loop takes requests in, in order, never un-takes
        assert sent.unseen_blocks(num_added) == sum(every[num_added:])


def test_a_long_serving_driver_keeps_only_what_is_in_flight():
    sent = Dispatched()
    for i in range(10_000):
        sent.add(3)
        assert sent.unseen_blocks(max(0, i - 1)) == 3 * min(i + 1, 2)
    assert len(sent.unseen) <= 2
