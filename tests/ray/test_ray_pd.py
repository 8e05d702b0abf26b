"""Prefill/decode disaggregation on the Ray backend (systems/pd_disagg/hand_over.py's rule, handed to every instance
actor): requests dispatched to the prefill instance only, each moved whole to a decode instance after its prefill
(its KV over the data plane, its Sequence adopted there), decoded there; the tokens of one local instance."""
import pytest

ray = pytest.importorskip("ray")

from reference_impl.backends.local import generate as local_generate  # noqa: E402
from reference_impl.backends.ray import RayConfig, RayEngine  # noqa: E402
from reference_impl.backends.ray.serving import RayServer, engine_run, loop_stats  # noqa: E402
from reference_impl.control.engine import EngineConfig  # noqa: E402
from reference_impl.control.sequence import Sequence  # noqa: E402
from reference_impl.model.llama import TINY, random_model  # noqa: E402
from reference_impl.serving.records import FINISHED  # noqa: E402
from reference_impl.systems.catalog import design  # noqa: E402
from reference_impl.systems.pd_disagg.hand_over import HandOver, hand_over  # noqa: E402
from workloads.request import Request  # noqa: E402

pytestmark = [pytest.mark.xdist_group("ray"), pytest.mark.usefixtures("local_ray")]

MODEL = random_model(TINY, seed=3)
PROMPTS = [[7, 300, 12, 9, 44], list(range(100, 131)), list(range(1, 22))]
NUM_NEW = 8
IDLE = {"num_used": 0, "reserved": {}, "num_moves": 0, "num_tables": 0}


def test_prefilled_on_one_actor_decoded_on_another_as_one_instance():
    config, rule = hand_over(EngineConfig(3, 16, block_size=4, seed=3), num_prefill=1)
    engine = RayEngine(config, MODEL, RayConfig(), homes=rule.prefill, moves=rule)
    try:
        seqs = [Sequence(i, list(p), NUM_NEW) for i, p in enumerate(PROMPTS)]
        assert {engine.add_request(seq) for seq in seqs} == {0}
        engine.run()
        want = local_generate(MODEL, PROMPTS, NUM_NEW, EngineConfig(1, 64, block_size=4), ignore_eos=True)
        assert [s.output_ids for s in seqs] == want.token_ids
        assert all(set(s.placement) <= {1, 2} and s.placement for s in seqs)  # each ended on a decode instance
        assert set(engine.home_of.values()) <= {1, 2}  # the driver learnt the new homes
        stats = loop_stats(engine)  # (as of each loop's next control phase)
        assert stats[0].num_requests_moved == len(PROMPTS) and stats[0].num_adopted == 0
        assert stats[1].num_adopted + stats[2].num_adopted == len(PROMPTS)
        assert stats[0].num_copied_blocks >= sum(-(-len(p) // 4) for p in PROMPTS)  # every prompt's KV crossed
        assert all(use == IDLE for use in engine.usage().values())
    finally:
        engine.shutdown()


def test_served_against_the_clock_as_the_design_gives_it():
    """The serving path of `repro run --backend ray` (RayServer, the design's EngineRun): every request finishes on
    a decode instance, twice on one warm engine (an equal rule is the same engine)."""
    chosen = engine_run(design("pd-disaggregation"), 2, 16, 4, max_batch_size=8, seed=0)
    assert (chosen.homes, chosen.moves, chosen.config.pooling) == ((0,), HandOver(1, 2), False)
    server = RayServer(MODEL, RayConfig())
    requests = [Request(i, 0.05 * i, n, 4, "test") for i, n in enumerate([5, 9, 13])]
    try:
        for _ in range(2):
            again = engine_run(design("pd-disaggregation"), 2, 16, 4, max_batch_size=8, seed=0)
            run, stats = server.serve(requests, again.config, placement=again.placement, homes=again.homes,
                                      moves=again.moves)
            assert run.count(FINISHED) == len(requests) and len(server.engines) == 1
            assert (stats[0].num_requests_moved, stats[1].num_adopted) == (len(requests), len(requests))
    finally:
        server.close()
