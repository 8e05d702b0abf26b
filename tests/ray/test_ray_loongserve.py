"""LoongServe on the Ray backend (the design's EngineRun: systems/loongserve/on_engine.py, its placement handed to
every instance actor, priced with the engine's cost model): each prompt split over the prefill group LoongServe's
analytic model chooses and prefilled sequence-parallel (every member
computes its own segment through the layers, backends/ray/sp_prefill.py), decode multi-master over the instances
holding the KV (DistAttention's remote path), no KV ever moved; the tokens of one local instance."""
import pytest

ray = pytest.importorskip("ray")

from dataclasses import replace  # noqa: E402

from reference_impl.backends.local import generate as local_generate  # noqa: E402
from reference_impl.backends.ray import RayConfig, RayEngine  # noqa: E402
from reference_impl.backends.ray.serving import engine_run, loop_stats  # noqa: E402
from reference_impl.backends.ray.stats import LoopStats  # noqa: E402
from reference_impl.calibration.model import CalibratedPerfModel  # noqa: E402
from reference_impl.control.engine import EngineConfig  # noqa: E402
from reference_impl.control.sequence import Sequence  # noqa: E402
from reference_impl.model.llama import TINY, random_model  # noqa: E402
from reference_impl.systems.catalog import design  # noqa: E402
from reference_impl.systems.loongserve.placement import peer_placement  # noqa: E402

pytestmark = [pytest.mark.xdist_group("ray"), pytest.mark.usefixtures("local_ray")]

MODEL = random_model(TINY, seed=3)
PROMPTS = [list(range(1, 45)), [7, 300, 12, 9, 44]]  # 11 rBlocks of 4 tokens: more than an instance's 8
NUM_NEW = 8


def test_prefilled_sequence_parallel_and_decoded_multi_master_as_one_instance():
    run = engine_run(design("loongserve"), 2, 8, 4, seed=3)
    assert (run.placement, run.config.pooling, run.config.exclusive_roles) == (peer_placement(2, 64), True, False)
    a100 = CalibratedPerfModel.for_setting(model="llama2-7b", gpu="A100-80GB-SXM")
    # attention-bound, so that the analytic model splits a 44-token prompt (tests/designs/test_loongserve_peers.py)
    perf_model = replace(a100, prefill_attn_s_per_pair=2000.0 * a100.prefill_attn_s_per_pair)
    engine = RayEngine(run.config, MODEL, RayConfig(), perf_model=perf_model, placement=run.placement,
                       homes=run.homes, moves=run.moves)
    try:
        seqs = [Sequence(i, list(p), NUM_NEW) for i, p in enumerate(PROMPTS)]
        for seq in seqs:  # both on instance 0: instance 1 stays idle, so the prefill group is both instances
            engine.add_request(seq, inst_id=0)
        engine.run()
        want = local_generate(MODEL, PROMPTS, NUM_NEW, EngineConfig(1, 64, block_size=4), ignore_eos=True)
        assert [s.output_ids for s in seqs] == want.token_ids
        # its KV over both (read at its end: the snapshots' entries may never show it, a quick run finishing between
        # two of the driver's polls), attended there: num_remote_steps below
        assert set(seqs[0].placement) == {0, 1}
        stats = loop_stats(engine)
        total = LoopStats.total(stats.values())
        assert total.num_moves_accepted == 0 and total.num_copied_blocks == 0  # placed, never moved
        assert total.num_sp_prefills >= 1 and total.num_sp_segments >= 2 * total.num_sp_prefills
        assert total.num_served >= total.num_sp_segments - total.num_sp_prefills  # the members computed theirs
        # the split prefill's step, then request 0's decode steps attending over both instances
        assert total.num_split_steps >= 1 and total.num_remote_steps >= NUM_NEW - 1
        assert total.num_split_steps + total.num_remote_steps <= total.num_steps
        assert 0 < total.split_step_s + total.remote_step_s <= total.step_s * (1 + 1e-9)
    finally:
        engine.shutdown()
