"""Ray backend on a private 2-CPU Ray: tokens and placement equal to the local backend, the three failures a
cluster meets (gManager restart, creditor death, a refused try_move_kvcache), and the CLI.

One module, one Ray for all cases (module fixture); `xdist_group` keeps the cases on one pytest-xdist worker
(`--dist loadgroup` in the Makefile), so two Rays never compete for the two CPUs."""
import json

import pytest

ray = pytest.importorskip("ray")

from click.testing import CliRunner  # noqa: E402

from reference_impl.backends.local import generate as local_generate  # noqa: E402
from reference_impl.backends.ray import RayConfig, RayEngine, generate  # noqa: E402
from reference_impl.engine import EngineConfig  # noqa: E402
from reference_impl.gmanager import GManagerConfig  # noqa: E402
from reference_impl.model import TINY, random_model  # noqa: E402
from reference_impl.sequence import Sequence  # noqa: E402
from repro.cli import cli  # noqa: E402

pytestmark = pytest.mark.xdist_group("ray")

MODEL = random_model(TINY, seed=3)
# 5, 31 and 60 tokens: with 8 rBlocks of 4 tokens per instance the two long ones spread over instances
PROMPTS = [[7, 300, 12, 9, 44], list(range(100, 131)), list(range(1, 61))]
SPREAD = EngineConfig(3, 8, block_size=4, gmanager_interval_steps=2)
NUM_NEW = 12


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, logging_level="WARNING", log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def local_run():
    return local_generate(MODEL, PROMPTS, NUM_NEW, SPREAD, ignore_eos=True)


def start(engine, prompts=PROMPTS):
    seqs = [Sequence(i, list(p), NUM_NEW) for i, p in enumerate(prompts)]
    for seq in seqs:
        engine.add_request(seq)
    return seqs


def assert_idle(engine):
    for inst_id, use in engine.usage().items():
        assert use == {"num_used": 0, "reserved": {}, "num_moves": 0, "num_tables": 0}, inst_id


def test_three_instances_match_the_local_backend(local_run):
    result = generate(MODEL, PROMPTS, NUM_NEW, SPREAD, ignore_eos=True)
    assert max(len(p) for p in result.placement) == 3  # the 60-token prompt lives on all three instances
    assert result.token_ids == local_run.token_ids
    assert result.placement == local_run.placement
    assert result.num_steps == local_run.num_steps and not result.failed


def test_gmanager_killed_mid_run_is_rebuilt_from_full_heartbeats(local_run):
    engine = RayEngine(SPREAD, MODEL)
    try:
        seqs = start(engine)
        for _ in range(4):
            engine.step()
        engine.restart_gmanager()
        engine.heartbeats()  # the first call meets the restarted actor: full heartbeats rebuild its map
        assert engine.gmanager.num_restarts == 1
        entries = {e for inst in engine.instances for e in inst.rm.entries()}
        rebuilt = engine.gmanager.placement_map()
        assert {e for es in rebuilt.values() for e in es} == entries
        assert any(len(es) > 1 for es in rebuilt.values())  # the map holds the spread requests again
        engine.run()
        assert [s.output_ids for s in seqs] == local_run.token_ids
        assert_idle(engine)
    finally:
        engine.shutdown()


def test_dead_creditor_recomputes_its_debtors_and_fails_what_no_longer_fits(local_run):
    engine = RayEngine(SPREAD, MODEL)
    try:
        seqs = start(engine)
        killed = []

        def kill_a_creditor(engine):
            if killed:
                return
            for inst in engine.instances:
                for req_id, home in engine.home_of.items():
                    if home == inst.inst_id and req_id != 2 and req_id in inst.rm.tables:
                        creditors = {b.inst_id for b in inst.rm.tables[req_id]} - {home}
                        if creditors:
                            victim = min(creditors)
                            ray.kill(engine.actors[victim], no_restart=True)
                            killed.append((victim, req_id))
                            return

        engine.run(on_step=kill_a_creditor)
        assert killed and engine.num_instance_failures == 1
        victim, debtor_req = killed[0]
        homeless = {r for r, h in engine.home_of.items() if h == victim}
        # the 60-token request needs 18 rBlocks; two survivors hold 16: it fails with a reason if it was orphaned
        for seq, want in zip(seqs, local_run.token_ids):
            if seq.req_id in engine.failed:
                assert seq.req_id == 2 and "died" in engine.failed[seq.req_id]
            else:
                assert seq.output_ids == want, seq.req_id
        assert seqs[debtor_req].num_preemptions >= 1  # its KV on the dead creditor was recomputed
        assert set(engine.failed) <= homeless
        assert_idle(engine)  # no block or reservation leaked on the survivors
    finally:
        engine.shutdown()


def test_try_move_refused_when_the_destination_fills_then_retried_next_round():
    """Instance 0: a long request filling it and a queue; instance 1: a short batch with room. Between the
    heartbeats and the round, instance 1 fills up behind the gManager's back: the move is refused, then
    accepted in the next round once the room is back, and the tokens do not change."""
    config = EngineConfig(2, 24, block_size=4, gmanager_interval_steps=0, dgfm=False)
    engine = RayEngine(config, MODEL, gmanager_config=GManagerConfig(block_size=4, beta_thres=2))
    try:
        long_prompt, shorts, queued = list(range(1, 89)), [[5, 6], [7], [8, 9], [3]], [[9] * 8] * 3
        seqs = [Sequence(0, long_prompt, 6)] + [Sequence(1 + i, p, 6) for i, p in enumerate(shorts)]
        seqs += [Sequence(5 + i, p, 6) for i, p in enumerate(queued)]
        for seq in seqs[:5]:
            engine.mirror[seq.req_id] = seq
            engine.instances[0 if seq.req_id == 0 else 1].scheduler.add(seq)
        engine.step()
        for seq in seqs[5:]:
            engine.mirror[seq.req_id] = seq
            engine.instances[0].scheduler.add(seq)
        engine.heartbeats()
        dst = engine.actors[1]
        room = ray.get(dst.rm_call.remote("num_lendable"))
        assert ray.get(dst.rm_call.remote("try_move_kvcache", 999, room))  # a racing reservation takes it all
        assert engine.gmanager_round() == 0
        assert ray.get(engine.actors[0].usage.remote())["num_moves"] == 0
        ray.get(dst.rm_call.remote("cancel_reservation", 999, None))
        engine.heartbeats()
        assert engine.gmanager_round() > 0
        engine.run()
        assert 1 in seqs[0].placement
        roomy = local_generate(MODEL, [s.prompt_ids for s in seqs], 6, EngineConfig(1, 64, block_size=4))
        assert [s.output_ids for s in seqs] == roomy.token_ids
        assert_idle(engine)
    finally:
        engine.shutdown()


def test_cli_generate_on_ray_matches_local():
    args = ["generate", "--instances", "3", "--blocks-per-instance", "6", "--block-size", "4", "--prompt-len", "40",
            "--max-new-tokens", "5", "--ignore-eos", "--json"]
    local = CliRunner().invoke(cli, args)
    on_ray = CliRunner().invoke(cli, args + ["--backend", "ray"])
    assert local.exit_code == 0 and on_ray.exit_code == 0, on_ray.output
    assert json.loads(on_ray.output) == json.loads(local.output)
    assert len(json.loads(on_ray.output)["placement"][0]) > 1


def test_ray_config_rejects_bad_settings():
    with pytest.raises(ValueError, match="placement strategy"):
        RayConfig(placement_strategy="RANDOM")
    with pytest.raises(ValueError, match="CPU"):
        RayConfig(cpus_per_instance=0)
