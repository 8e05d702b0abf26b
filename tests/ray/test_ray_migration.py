"""Llumnix's live migration on the Ray backend (backends/ray/migration.py): a request migrated mid-decode by pre-copy
stages (its KV copied over the data plane while it keeps decoding on its source), then the pause and the move whole
(adopted by the destination once its KV landed), gives one local instance's tokens; an aborted migration leaves its
request decoding at home and frees what its stages filled on the destination."""
import time

import pytest

ray = pytest.importorskip("ray")

from reference_impl.backends.local import generate as local_generate  # noqa: E402
from reference_impl.backends.ray import RayConfig, RayEngine  # noqa: E402
from reference_impl.backends.ray.serving import loop_stats  # noqa: E402
from reference_impl.control.engine import EngineConfig  # noqa: E402
from reference_impl.control.sequence import Sequence  # noqa: E402
from reference_impl.model.llama import TINY, random_model  # noqa: E402

pytestmark = [pytest.mark.xdist_group("ray"), pytest.mark.usefixtures("local_ray")]

MODEL = random_model(TINY, seed=3)
PROMPTS = [[5, 90, 13, 2, 77, 41, 8, 120, 33], [64, 3, 3, 101, 27, 9, 58, 11, 96, 20, 7], [9, 8, 7, 6, 5, 4, 3]]
NUM_NEW = 24
IDLE = {"num_used": 0, "reserved": {}, "num_moves": 0, "num_tables": 0}


def test_migrated_mid_decode_as_one_instance():
    from reference_impl.model.device_time import DeviceTimeModel

    config = EngineConfig(3, 16, block_size=4, pooling=False, seed=3)  # vLLM-M's
    # 20 ms of device time a step: an actor that gets a core late (a loaded machine) cannot see the others run to
    # the end of their requests before it has decoded two tokens
    engine = RayEngine(config, DeviceTimeModel(0.02, MODEL), RayConfig())
    try:
        seqs = [Sequence(i, list(p), NUM_NEW) for i, p in enumerate(PROMPTS)]
        homes = [engine.add_request(seq, i) for i, seq in enumerate(seqs)]
        deadline = time.monotonic() + 60
        while not all(len(s.output_ids) >= 2 for s in seqs):
            assert time.monotonic() < deadline
            engine.poll()
        engine.pause()  # every loop held at its iteration boundary: the requests are mid-decode
        try:
            assert all(len(s.output_ids) < NUM_NEW - 4 for s in seqs)
            engine.migrate(0, 1, last_stage_blocks=1, max_stages=20)  # pre-copy, then the pause and the move
            engine.migrate(1, 2, last_stage_blocks=1, max_stages=20)
            engine.migrate(2, 0, last_stage_blocks=1, max_stages=1)  # one pre-copy stage, then aborted
            engine.delivered()
        finally:
            engine.resume()
        engine.run()
        want = local_generate(MODEL, PROMPTS, NUM_NEW, EngineConfig(1, 64, block_size=4), ignore_eos=True)
        assert [s.output_ids for s in seqs] == want.token_ids
        assert [set(s.placement) for s in seqs] == [{1}, {2}, {homes[2]}]
        stats = loop_stats(engine)
        assert [(s.num_migrations_started, s.num_migrations_completed, s.num_migrations_aborted)
                for s in stats.values()] == [(1, 1, 0), (1, 1, 0), (1, 0, 1)]
        assert all(s.num_precopy_stages >= 1 for s in stats.values())  # every migration copied while decoding
        assert (stats[1].num_adopted, stats[2].num_adopted, stats[0].num_adopted) == (1, 1, 0)
        assert all(use == IDLE for use in engine.usage().values())  # the aborted stage's blocks freed on 0
    finally:
        engine.shutdown()


def test_llumnix_pairs_and_migrates_on_its_own():
    """The design's run (systems/llumnix/on_engine.py, its rule given to every actor): every request on instance 0,
    which is a source by its freeness (threshold 0 here) while instance 1 is idle; it migrates requests out to 1
    by itself, and the tokens are one instance's."""
    from reference_impl.systems.catalog import design
    from reference_impl.systems.llumnix.knobs import LlumnixKnobs

    knobs = LlumnixKnobs(migrate_out_freeness_tok=0.0, last_stage_max_tokens=4, max_stages=20)
    run = design("llumnix").engine_run(EngineConfig(2, 16, block_size=4, seed=3), knobs)
    engine = RayEngine(run.config, MODEL, RayConfig(), moves=run.moves)
    prompts = [[(5 * i + 7 * j) % 400 + 1 for j in range(13)] for i in range(4)]  # 4 rBlocks each: 0 is full
    try:
        seqs = [Sequence(i, p, 12) for i, p in enumerate(prompts)]
        for seq in seqs:
            engine.add_request(seq, 0)
        engine.run()
        want = local_generate(MODEL, prompts, 12, EngineConfig(1, 64, block_size=4), ignore_eos=True)
        assert [s.output_ids for s in seqs] == want.token_ids
        stats = loop_stats(engine)
        assert stats[0].num_migrations_completed >= 1 and stats[1].num_adopted == stats[0].num_migrations_completed
        assert any(set(s.placement) == {1} for s in seqs)
        assert all(use == IDLE for use in engine.usage().values())
    finally:
        engine.shutdown()
