"""Algorithm 1 on hand-built states (infinite-llm Figure 5) and the gManager's recalls and hints."""
from reference_impl.control.algorithm1 import cluster_tps, instance_load
from reference_impl.control.engine_config import EngineConfig, GManagerConfig
from reference_impl.control.gmanager import GManager
from reference_impl.control.protocol import Heartbeat, InstanceStatus, RequestPlacementEntry as Entry

BLOCK = 16
CAP = 100


def heartbeat(gm, inst, used, batch, entries, waiting=0, waiting_blocks=0.0):
    status = InstanceStatus(inst, CAP, CAP - used, CAP - used, batch, waiting, waiting_blocks)
    gm.heartbeat(Heartbeat(status, tuple(entries), full=True))


def figure5(gm):
    """A saturated by a long request, B and C busy with short ones and room, D long with some room."""
    heartbeat(gm, 0, 100, 1, [Entry(0, 0, 100, True)], waiting=12, waiting_blocks=5)
    for inst in (1, 2):
        heartbeat(gm, inst, 32, 16, [Entry(100 * inst + j, inst, 2, True) for j in range(16)])
    heartbeat(gm, 3, 80, 1, [Entry(3, 3, 80, True)], waiting=12, waiting_blocks=5)


def test_figure5_proactive_placement_raises_debtor_batch_and_throughput():
    gm = GManager(EngineConfig(block_size=BLOCK, gmanager=GManagerConfig(beta_thres=4, util_thres=0.7)))
    figure5(gm)
    before = gm.views()
    tps_before = cluster_tps(gm.perf_model, before.values(), BLOCK)
    moves = gm.run_round()
    assert moves, "the saturated debtors must offload"
    assert {m.req_id for m in moves} == {0, 3}  # the debtors' longest requests
    assert {m.dst_inst for m in moves} <= {1, 2}  # creditors only, never a debtor
    after = gm.views()
    for m in moves:  # apply the plan to the view as the rManagers would
        home = 0 if m.req_id == 0 else 3
        after[home].free_blocks += m.num_blocks
        after[home].kv_blocks -= m.num_blocks
        after[home].num_remote_queries += 1
        after[m.dst_inst].free_blocks -= m.num_blocks
        after[m.dst_inst].kv_blocks += m.num_blocks
    for debtor in (0, 3):
        assert instance_load(after[debtor], BLOCK).batch_size > instance_load(before[debtor], BLOCK).batch_size
    assert cluster_tps(gm.perf_model, after.values(), BLOCK) > tps_before


def test_no_gain_no_move():
    gm = GManager(EngineConfig(block_size=BLOCK, gmanager=GManagerConfig(beta_thres=4)))
    heartbeat(gm, 0, 100, 1, [Entry(0, 0, 100, True)])  # saturated but nothing waits: no batch to gain
    heartbeat(gm, 1, 32, 16, [Entry(100 + j, 1, 2, True) for j in range(16)])
    assert gm.run_round() == []


def test_debtor_with_free_space_recalls_first_and_is_not_a_creditor():
    gm = GManager(EngineConfig(block_size=BLOCK, gmanager=GManagerConfig(beta_thres=4)))
    heartbeat(gm, 0, 50, 1, [Entry(0, 0, 40, True)], waiting=0)
    heartbeat(gm, 1, 30, 2, [Entry(0, 1, 10, False), Entry(1, 1, 20, True)])
    heartbeat(gm, 2, 0, 0, [])
    assert gm.ledger() == {1: {0: 10}}
    moves = gm.run_round()
    assert moves[0].req_id == 0 and moves[0].dst_inst == 0 and moves[0].num_blocks == 10
    assert all(m.dst_inst != 0 for m in moves[1:])
    assert 0 not in gm.recommend_creditors(2, 1)  # a debtor is never recommended as a creditor


def test_recommendations_by_locality_then_space():
    gm = GManager(EngineConfig(block_size=BLOCK, gmanager=GManagerConfig(instances_per_node=2)))
    for inst, used in enumerate([90, 60, 10, 0, 50]):
        heartbeat(gm, inst, used, 1, [])
    assert gm.recommend_creditors(0, 5) == [1, 3, 2]  # same node (1) first, then the emptiest
