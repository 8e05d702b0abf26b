"""The two choices of prefill/decode disaggregation, shared by its simulated policy (policy.py) and its real runs on
the local engine (local.py) and on Ray (hand_over.py): which prefill instance takes a new request, and which decode
instance takes a prefilled one."""
from reference_impl.errors import InputError


def check_split(num_prefill: int, num_instances: int) -> None:
    """InputError unless the split keeps at least one prefill and one decode instance."""
    if not 1 <= num_prefill < num_instances:
        raise InputError(f"a prefill/decode split needs 1 to {num_instances - 1} prefill instances of "
                         f"{num_instances} (got {num_prefill})")


def least_loaded(prefill: list):
    """The prefill instance with the fewest rBlocks queued and held (ties: the lowest id)."""
    return min(prefill, key=lambda i: (i.scheduler.num_waiting_blocks + i.rm.pool.num_used, i.inst_id))


def freest_room(rooms: list[tuple[int, int, int]], num_blocks: int, max_batch_size: int) -> int | None:
    """The index in `rooms` of the decode instance with the most free rBlocks among those with room for
    `num_blocks` and a place in their batch; a room is (inst_id, free rBlocks, requests running there or on their
    way there). Ties: the lowest id; None when none has room."""
    fit = [k for k, (_, free, busy) in enumerate(rooms) if free >= num_blocks and busy < max_batch_size]
    return max(fit, key=lambda k: (rooms[k][1], -rooms[k][0]), default=None)


def freest_decode(decode: list, num_blocks: int, incoming: list[int], max_batch_size: int):
    """`freest_room` of the instances `decode`, the transfers on their way to each (`incoming`, per instance id)
    counted in its batch; the instance, or None."""
    k = freest_room([(i.inst_id, i.rm.num_free, len(i.scheduler.running) + incoming[i.inst_id]) for i in decode],
                    num_blocks, max_batch_size)
    return None if k is None else decode[k]
