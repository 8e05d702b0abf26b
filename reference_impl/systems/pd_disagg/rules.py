"""The two choices of prefill/decode disaggregation, shared by its simulated policy (policy.py) and its real run on
the local engine (local.py): which prefill instance takes a new request, and which decode instance takes a prefilled
one."""


def least_loaded(prefill: list):
    """The prefill instance with the fewest rBlocks queued and held (ties: the lowest id)."""
    return min(prefill, key=lambda i: (i.scheduler.num_waiting_blocks + i.rm.pool.num_used, i.inst_id))


def freest_decode(decode: list, num_blocks: int, incoming: list[int], max_batch_size: int):
    """The decode instance with the most free rBlocks among those with room for `num_blocks` and a place in their
    batch once the transfers on their way there (`incoming`, per instance id) land (ties: the lowest id); None when
    none has."""
    room = [i for i in decode if i.rm.num_free >= num_blocks
            and len(i.scheduler.running) + incoming[i.inst_id] < max_batch_size]
    return max(room, key=lambda i: (i.rm.num_free, -i.inst_id), default=None)
