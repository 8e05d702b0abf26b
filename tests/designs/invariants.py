"""Invariants of a simulated cluster that every design keeps, checked between events (Simulator's `on_event`)."""
from collections import Counter


def check_cluster(engine) -> None:
    """Every allocated rBlock is in exactly one table, of the request that owns it, and every table's rBlock is
    allocated; a request is homed on one instance at most; no instance holds or promises more than its room; a
    request in a batch is homed where the batch is, and is in one batch at most."""
    tabled, owned, homes = Counter(), Counter(), Counter()
    rms = engine.rmanagers
    for inst_id, rm in rms.items():
        assert rm.pool.num_used + rm.pool.num_free == rm.pool.num_capacity
        assert rm.num_free >= 0, f"instance {inst_id} is over its room"
        assert rm.num_reserved == sum(rm.reserved.values()) and all(n > 0 for n in rm.reserved.values())
        owned.update((inst_id, key) for key in rm.pool.owner)
        homes.update(rm.tables.keys())
        for req_id, table in rm.tables.items():
            for b in table:
                assert rms[b.inst_id].pool.owner[(b.device, b.address)] == req_id
                tabled[(b.inst_id, (b.device, b.address))] += 1
    assert tabled == owned and all(n == 1 for n in tabled.values()), "an rBlock without exactly one home"
    assert all(n == 1 for n in homes.values()), "a request homed on two instances"
    batched = Counter()
    for inst in engine.instances:
        for seq in inst.scheduler.running:
            batched[seq.req_id] += 1
            assert seq.req_id in inst.rm.tables, f"request {seq.req_id} runs where its KV is not homed"
    assert all(n == 1 for n in batched.values()), "a request in two batches"
