"""Ray backend on a private 2-CPU Ray: tokens and placement equal to the local backend, the three failures a
cluster meets (gManager restart, creditor death, a refused try_move_kvcache), real-time serving, the CLI.

One module, one Ray for all cases (module fixture); `xdist_group` keeps the cases on one pytest-xdist worker
(`--dist loadgroup` in the Makefile), so two Rays never compete for the two CPUs."""
import json

import pytest

ray = pytest.importorskip("ray")

from click.testing import CliRunner  # noqa: E402

from reference_impl.backends.local import generate as local_generate  # noqa: E402
from reference_impl.backends.ray import RayConfig, RayEngine, check_reachable  # noqa: E402
from reference_impl.engine import EngineConfig  # noqa: E402
from reference_impl.gmanager import GManagerConfig  # noqa: E402
from reference_impl.model import TINY, random_model  # noqa: E402
from reference_impl.sequence import Sequence  # noqa: E402
from repro.cli import cli  # noqa: E402

pytestmark = pytest.mark.xdist_group("ray")

MODEL = random_model(TINY, seed=3)
# 5, 31 and 60 tokens: with 8 rBlocks of 4 tokens per instance the two long ones spread over instances
PROMPTS = [[7, 300, 12, 9, 44], list(range(100, 131)), list(range(1, 61))]
SPREAD = EngineConfig(3, 8, block_size=4, seed=3)  # what the CLI case below asks for
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
    """`repro generate --backend ray`: the tokens and final placement of the local backend."""
    args = ["generate", "--instances", "3", "--blocks-per-instance", "8", "--block-size", "4", "--seed", "3",
            "--max-new-tokens", str(NUM_NEW), "--ignore-eos", "--json", "--backend", "ray"]
    args += [a for p in PROMPTS for a in ("--prompt-ids", ",".join(map(str, p)))]
    on_ray = CliRunner().invoke(cli, args)
    assert on_ray.exit_code == 0, on_ray.output
    out = json.loads(on_ray.output)
    placement = [{w["inst_id"]: w["num_blocks"] for w in p} for p in out["placement"]]
    assert max(len(p) for p in placement) == 3  # the 60-token prompt lives on all three instances
    assert out["token_ids"] == local_run.token_ids
    assert placement == local_run.placement


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


def test_ray_config_rejects_bad_settings():
    with pytest.raises(ValueError, match="placement strategy"):
        RayConfig(placement_strategy="RANDOM")
    with pytest.raises(ValueError, match="CPU"):
        RayConfig(cpus_per_instance=0)
    with pytest.raises(ValueError, match="cannot reach the Ray cluster"):  # at once, not Ray's minutes of retries
        check_reachable("127.0.0.1:1", 5.0)


def test_e2e_quick_on_ray_validates_against_the_schema(tmp_path):
    from repro.experiments.base import RunParams
    from repro.experiments.registry import get_experiment
    from repro.results import load_results, run_and_save

    exp = get_experiment("e2e")
    path, ran = run_and_save(exp, RunParams(quick=True, backend="ray", extra={"requests": "4"}), tmp_path,
                             log=lambda line: None)
    assert ran and path.exists()
    (result,) = load_results(tmp_path, exp)  # validated against serving.schema.json on load
    (group,) = result["data"]["groups"]
    points = {p["system"]: p for p in group["points"]}
    assert set(points) == {"infinite-llm", "vllm-m"}
    # the longest request needs 4/3 of an instance: vLLM-M rejects it, pooled KV serves everything
    assert points["infinite-llm"]["num_finished"] == 4 and points["infinite-llm"]["output_tok_s"] > 0
    assert points["infinite-llm"]["mean_ttft_s"] > 0 and points["vllm-m"]["num_rejected"] >= 1


def test_dgfm_swap_across_actors_matches_the_local_engine():
    """A debt cycle (0's request lends on 1, 1's on 0) on full instances: the gManager round swaps the
    blocks home through the actors' tables and the object store, exactly as the local engine does."""
    from reference_impl.backends.local import LocalBackend
    from reference_impl.engine import Engine

    config = EngineConfig(2, 6, block_size=4, gmanager_interval_steps=0)

    def scenario(engine):
        # 13 + 3 tokens and 5 + 3 tokens: no request needs a new rBlock while decoding
        seqs = [Sequence(0, list(range(1, 14)), 3), Sequence(1, list(range(20, 33)), 3),
                Sequence(2, [4, 5, 6, 7, 8], 3), Sequence(3, [9, 8, 7, 6, 5], 3)]

        def put(seq, inst_id):
            getattr(engine, "mirror", {})[seq.req_id] = seq
            engine.instances[inst_id].scheduler.add(seq)

        put(seqs[0], 0)
        put(seqs[1], 1)
        engine.step()
        assert engine.rmanagers[0].move_kvcache(0, 2, 1) and engine.rmanagers[1].move_kvcache(1, 2, 0)
        engine.step()
        put(seqs[2], 0)
        put(seqs[3], 1)
        engine.step()  # both instances are full now: only a swap can bring the blocks home
        engine.heartbeats()
        engine.gmanager_round()
        engine.run()
        return [s.output_ids for s in seqs], [s.placement for s in seqs], engine.num_swaps

    local = scenario(Engine(config, LocalBackend(MODEL, config)))
    assert local[2] == 1 and local[1][:2] == [{0: 4}, {1: 4}]  # the swap brought both requests home
    engine = RayEngine(config, MODEL)
    try:
        assert scenario(engine) == local
        assert_idle(engine)
    finally:
        engine.shutdown()
