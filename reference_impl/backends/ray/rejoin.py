"""Rejoin after an instance died: the loop leaves the broken data-plane group, joins the survivors' new one (serving
mail while it forms), then recomputes every running request here (the aborted step may have half-written KV or
moved blocks), forgets the dead peers and frees what the requests homed there hold here. Runs on the loop thread
at an iteration boundary, once the driver's `Reform` message came (messages.py)."""
import threading

from reference_impl.backends.ray.messages import Reform
from reference_impl.control.rblock import RBlock


def rejoin(loop, reform: Reform) -> None:
    loop.group = reform.spec.address
    loop.plane.close()
    loop.exchange.serving = []
    joined = {}
    thread = threading.Thread(target=lambda: joined.setdefault("plane", reform.make_plane(reform.spec)), daemon=True)
    thread.start()
    loop.mailbox.wait(lambda: not thread.is_alive())
    loop.plane = joined["plane"]
    loop.last = None
    rm, scheduler = loop.rm, loop.scheduler
    for seq in list(scheduler.running):
        scheduler.preempt(seq)
    for req_id in list(rm.tables):  # half-admitted when the failure hit mid-admission
        rm.free_request(req_id)
    homed = set(reform.homed_there)
    for (tier, address), req_id in list(rm.pool.owner.items()):
        if req_id in homed:
            rm.release(RBlock(-1, loop.inst_id, tier, address))
    for req_id in homed:
        rm.cancel_reservation(req_id)
    for d in reform.dead:
        rm.peers.pop(d, None)
        loop.handles.pop(d, None)
    loop.link.full = True
    loop.publish()
