"""A small cluster of rManagers and a gManager without tensors, and the invariants the protocol's tests check."""
from collections import Counter

from reference_impl.control.engine_config import EngineConfig, GManagerConfig
from reference_impl.control.gmanager import GManager
from reference_impl.control.protocol import InstanceStatus
from reference_impl.control.rmanager import RManager

NUM_INSTANCES = 3


def make_cluster(blocks, cap, exclusive_roles=True):
    peers = {}
    rms = [RManager(i, n, 1, max_lent_blocks=cap, peers=peers, exclusive_roles=exclusive_roles)
           for i, n in enumerate(blocks)]
    return rms, GManager(EngineConfig(block_size=4, exclusive_roles=exclusive_roles,
                                      gmanager=GManagerConfig(instances_per_node=2)))


def status(rm):
    return InstanceStatus(rm.inst_id, rm.pool.num_capacity, rm.num_free, rm.num_lendable, len(rm.tables))


def send_heartbeats(rms, gm, full=False):
    for rm in rms:
        gm.heartbeat(rm.heartbeat(status(rm), full=full))


def no_copy(pairs):
    pass


class FakeKV:
    """Block contents: each rBlock holds (req_id, logical index); copies read every source first."""

    def __init__(self):
        self.content = {}
        self.lengths = {}

    def copy(self, pairs):
        staged = [(dst, self.content.get((src.inst_id, src.device, src.address))) for src, dst in pairs]
        for dst, data in staged:
            self.content[(dst.inst_id, dst.device, dst.address)] = data

    def check_and_write(self, rms):
        tables = {r: t for rm in rms for r, t in rm.tables.items()}
        for req_id, table in tables.items():
            known = self.lengths.get(req_id, 0)
            for i, b in enumerate(table):
                key = (b.inst_id, b.device, b.address)
                if i < known:
                    assert self.content.get(key) == (req_id, i), "KV lost or corrupted by a move"
                else:
                    self.content[key] = (req_id, i)
        self.lengths = {r: len(t) for r, t in tables.items()}


def check_invariants(rms, exclusive_roles=True):
    owners = Counter()
    for rm in rms:
        assert rm.pool.num_used + rm.pool.num_free == rm.pool.num_capacity
        assert rm.num_free >= 0
        assert rm.num_lent <= rm.max_lent_blocks
        held = Counter(rm.pool.owner.values())
        assert held == Counter({r: n for r, n in rm.hosted.items()})
        for key in rm.pool.owner:
            owners[(rm.inst_id, key)] += 1
        for req_id, table in rm.tables.items():  # the holders index is the table, counted
            assert rm.holders(req_id) == Counter(b.inst_id for b in table)
        assert rm.num_borrowed == sum(b.inst_id != rm.inst_id for t in rm.tables.values() for b in t)
        assert rm.num_lent == sum(n for r, n in rm.hosted.items() if r not in rm.tables)
        assert rm.num_reserved == sum(rm.reserved.values()) and all(n > 0 for n in rm.reserved.values())
        if exclusive_roles:
            assert not (rm.is_debtor and rm.is_creditor), f"instance {rm.inst_id} borrows and lends at once"
    tabled = Counter()
    for rm in rms:
        for req_id, table in rm.tables.items():
            for b in table:
                tabled[(b.inst_id, (b.device, b.address))] += 1
                assert rms[b.inst_id].pool.owner[(b.device, b.address)] == req_id
    # every allocated block is in exactly one request's table, and every table block is allocated
    assert tabled == owners
    assert all(n == 1 for n in tabled.values())
    ids = [b.rblock_id for rm in rms for t in rm.tables.values() for b in t]
    assert len(ids) == len(set(ids))
    check_reservations(rms)
    check_move_cursors(rms)


def check_move_cursors(rms):
    """A move scans its request's table from its cursor: no block before it is one the move may take."""
    for rm in rms:
        for m in rm.moves:
            table = rm.tables[m.req_id]
            before = [b.inst_id for b in table[:m.cursor]]
            if m.src_inst == -1:  # a recall: any block not at home
                assert all(i in (rm.inst_id, m.dst_inst) for i in before), "a recall's cursor skips a remote block"
            else:
                assert m.src_inst not in before, "a move's cursor skips a block on its source"


def check_reservations(rms):
    """Every reservation is room promised to a pending move into that instance, at most what it still moves."""
    pending = Counter()
    for rm in rms:
        for m in rm.moves:
            assert m.req_id in rm.tables and m.num_blocks > 0
            pending[(m.req_id, m.dst_inst)] += m.num_blocks
    for rm in rms:
        for req_id, n in rm.reserved.items():
            assert n <= pending[(req_id, rm.inst_id)], f"reservation of {req_id} on {rm.inst_id} has no move"


def true_ledger(rms):
    homes = {r: rm.inst_id for rm in rms for r in rm.tables}
    ledger = {}
    for rm in rms:
        for req_id, n in rm.hosted.items():
            if homes[req_id] != rm.inst_id:
                ledger.setdefault(rm.inst_id, {}).setdefault(homes[req_id], 0)
                ledger[rm.inst_id][homes[req_id]] += n
    return ledger


def true_map(rms):
    return {r: tuple(sorted((e for rm in rms for e in rm.entries() if e.req_id == r), key=lambda e: e.inst_id))
            for r in sorted({e.req_id for rm in rms for e in rm.entries()})}
