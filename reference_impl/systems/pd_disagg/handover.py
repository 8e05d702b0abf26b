"""A prefilled request's move from its prefill instance to a decode instance, on the rManagers' own calls: room on
the destination is reserved as the transfer starts (try_move_kvcache), and at its end the source frees the
request's KV and the destination admits it (alloc_prompt) into its running batch, so the request has one home at
every event. A reservation the destination took back for its own growth (RManager._reclaim_reservations) fails
the landing: the KV stays on the source and the request queues again."""
from reference_impl.control.instance import Instance
from reference_impl.control.sequence import Sequence


def reserve(dst: Instance, req_id: int, num_blocks: int) -> bool:
    return dst.rm.try_move_kvcache(req_id, num_blocks)


def land(src: Instance, dst: Instance, seq: Sequence, num_blocks: int) -> bool:
    """Move `seq` (its `num_blocks` of KV) from `src` to `dst`'s running batch; False when `dst` lost the room."""
    dst.rm.cancel_reservation(seq.req_id)
    if dst.rm.num_free < num_blocks:
        return False
    src.rm.free_request(seq.req_id)
    if not dst.rm.alloc_prompt(seq.req_id, num_blocks):
        raise AssertionError(f"request {seq.req_id}: {num_blocks} rBlocks free but not admitted")
    dst.scheduler._run([seq])  # (admitted with its KV: it joins the batch as a prefilled request)
    return True
