"""Ray backend on a private 2-CPU Ray, instances running their own loops at once: tokens equal to the local
backend with KV spread over instances, the three failures a cluster meets (gManager restart, creditor death, a
refused try_move_kvcache) while the loops run, real-time serving, the CLI.

One module, one Ray for all cases (module fixture); `xdist_group` keeps the cases on one pytest-xdist worker
(`--dist loadgroup` in the Makefile), so two Rays never compete for the two CPUs."""
import json
import time

import pytest

ray = pytest.importorskip("ray")

from click.testing import CliRunner  # noqa: E402

from reference_impl.backends.local import generate as local_generate  # noqa: E402
from reference_impl.backends.ray import RayConfig, RayEngine, check_reachable  # noqa: E402
from reference_impl.control.engine import EngineConfig  # noqa: E402
from reference_impl.control.gmanager import GManagerConfig  # noqa: E402
from reference_impl.model.llama import TINY, random_model  # noqa: E402
from reference_impl.control.sequence import Sequence  # noqa: E402
from repro.cli import cli  # noqa: E402

pytestmark = [pytest.mark.xdist_group("ray"), pytest.mark.usefixtures("local_ray")]

MODEL = random_model(TINY, seed=3)
# 5, 31 and 60 tokens: with 8 rBlocks of 4 tokens per instance the two long ones spread over instances
PROMPTS = [[7, 300, 12, 9, 44], list(range(100, 131)), list(range(1, 61))]
SPREAD = EngineConfig(3, 8, block_size=4, seed=3)  # what the CLI case below asks for
NUM_NEW = 12



@pytest.fixture(scope="module")
def local_run():
    return local_generate(MODEL, PROMPTS, NUM_NEW, SPREAD, ignore_eos=True)


def start(engine, prompts=PROMPTS):
    seqs = [Sequence(i, list(p), NUM_NEW) for i, p in enumerate(prompts)]
    for seq in seqs:
        engine.add_request(seq)
    return seqs


def wait_for(engine, condition, timeout_s=60.0):
    deadline = time.monotonic() + timeout_s
    while not condition(engine):
        assert time.monotonic() < deadline, f"timed out; instances: {engine.snapshots}"
        engine.poll()
        time.sleep(0.01)


def assert_idle(engine):
    """Every block and reservation back (the instances publish their pools at their next control phase)."""
    idle = {"num_used": 0, "reserved": {}, "num_moves": 0, "num_tables": 0}
    wait_for(engine, lambda e: all(use == idle for use in e.usage().values()), timeout_s=10)


def spread(engine) -> bool:
    """Some request holds rBlocks on an instance other than its home (from the instances' published entries)."""
    engine.poll()
    return any(not e.local and e.num_blocks for s in engine.snapshots.values() for e in s.entries)


def test_three_instances_match_the_local_backend(local_run):
    """`repro generate --backend ray`: the tokens of the local backend, the long prompt spread over instances."""
    args = ["generate", "--instances", "3", "--blocks-per-instance", "8", "--block-size", "4", "--seed", "3",
            "--max-new-tokens", str(NUM_NEW), "--ignore-eos", "--json", "--backend", "ray"]
    args += [a for p in PROMPTS for a in ("--prompt-ids", ",".join(map(str, p)))]
    on_ray = CliRunner().invoke(cli, args)
    assert on_ray.exit_code == 0, on_ray.output
    out = json.loads(on_ray.output)
    placement = [{w["inst_id"]: w["num_blocks"] for w in p} for p in out["placement"]]
    assert len(placement[2]) >= 2  # 60 + 12 tokens need 18 rBlocks of 4; an instance holds 8
    assert out["token_ids"] == local_run.token_ids


def test_gmanager_killed_mid_run_is_rebuilt_from_full_heartbeats(local_run):
    engine = RayEngine(SPREAD, MODEL)
    try:
        seqs = start(engine)
        wait_for(engine, spread)
        engine.restart_gmanager()
        # every instance's counters (an instance publishes them at its control phases: they lag a little)
        wait_for(engine, lambda e: len(e.stats()) == len(e.actors)
                 and all(s.num_gmanager_restarts >= 1 for s in e.stats().values()))
        engine.pause()  # no control phase runs: the placement is still, the map catches up with one heartbeat
        try:
            engine.sync_now()
            entries = {e for a in engine.actors.values() for e in ray.get(a.entries.remote())}
            rebuilt = ray.get(engine.gm_actor.placement_map.remote())
            assert {e for es in rebuilt.values() for e in es} == entries
        finally:
            engine.resume()
        engine.run()
        assert [s.output_ids for s in seqs] == local_run.token_ids
        wait_for(engine, lambda e: all(s.num_full_heartbeats >= 2 for s in e.stats().values()), timeout_s=10)
        # each home ran its own loop (an instance homing nothing need not step); the counters are published at a
        # control phase, which can run its report (the last tokens) before its publish: wait for the next one
        homes = set(engine.home_of.values())
        wait_for(engine, lambda e: all(s.num_steps >= NUM_NEW for i, s in e.stats().items() if i in homes),
                 timeout_s=10)
        assert_idle(engine)
    finally:
        engine.shutdown()


def test_dead_creditor_recomputes_its_debtors_and_fails_what_no_longer_fits(local_run):
    # a survivor waiting on a transfer that the failure left unanswered gives up after dist_timeout_s
    engine = RayEngine(SPREAD, MODEL, RayConfig(dist_timeout_s=15))
    try:
        seqs = start(engine)
        killed = []

        def kill_a_creditor(engine):
            if killed:
                return
            for snap in engine.snapshots.values():
                for e in snap.entries:
                    home = engine.home_of[e.req_id]
                    if not e.local and e.num_blocks and e.req_id != 2 and e.inst_id != home:
                        ray.kill(engine.actors[e.inst_id], no_restart=True)
                        killed.append((e.inst_id, e.req_id))
                        return

        engine.run(on_poll=kill_a_creditor)
        assert killed and engine.num_instance_failures == 1
        victim, debtor_req = killed[0]
        # the 60-token request needs up to 18 rBlocks; two survivors hold 16: recomputed there, it fails with a reason
        for seq, want in zip(seqs, local_run.token_ids):
            if seq.req_id in engine.failed:
                assert seq.req_id == 2 and "died" in engine.failed[seq.req_id]
            else:
                assert seq.output_ids == want, seq.req_id
        assert seqs[debtor_req].num_preemptions >= 1  # its KV on the dead creditor was recomputed
        assert_idle(engine)  # no block or reservation leaked on the survivors
    finally:
        engine.shutdown()


def test_try_move_refused_when_the_destination_fills_then_retried_next_round():
    """Instance 0: a long request filling it and a queue; instance 1: a short batch with room. Between the
    heartbeats and the round, instance 1 fills up behind the gManager's back: the move is refused, then
    accepted in the next round once the room is back, and the tokens do not change. Steps last 0.1 s of device
    time, so the long request and the queue are still there at the second round (the instances run on their own:
    nothing else orders them)."""
    from reference_impl.model.device_time import DeviceTimeModel

    config = EngineConfig(2, 24, block_size=4, dgfm=False).without_gmanager_rounds()
    engine = RayEngine(config, DeviceTimeModel(0.1, MODEL), gmanager_config=GManagerConfig(interval_s=None,
                                                                                            beta_thres=2))
    try:
        long_prompt, shorts, queued = list(range(1, 89)), [[5, 6], [7], [8, 9], [3]], [[9] * 8] * 3
        seqs = [Sequence(0, long_prompt, 24)] + [Sequence(1 + i, p, 24) for i, p in enumerate(shorts)]
        seqs += [Sequence(5 + i, p, 6) for i, p in enumerate(queued)]
        for seq in seqs[:5]:
            engine.add_request(seq, 0 if seq.req_id == 0 else 1)
        wait_for(engine, lambda e: all(s.output_ids for s in seqs[:5]))
        dst = engine.actors[1]

        def round_while_paused(before_heartbeats, after_heartbeats) -> None:
            """Everything held: heartbeats, then a gManager round that moves request 0 onto instance 1."""
            engine.pause()
            try:
                before_heartbeats()
                engine.sync_now()
                after_heartbeats()
                moves = ray.get(engine.gm_actor.run_round.remote())
                assert any(m.req_id == 0 and m.dst_inst == 1 for m in moves), moves
            finally:
                engine.resume()

        def queue():
            for seq in seqs[5:]:
                engine.add_request(seq, 0)

        def race():  # behind the gManager's back, a racing reservation takes instance 1's room
            assert ray.get(dst.try_move_kvcache.remote(999, ray.get(dst.num_lendable.remote())))

        round_while_paused(queue, race)
        wait_for(engine, lambda e: e.stats()[0].num_moves_refused == 1)
        assert engine.stats()[0].num_moves_accepted == 0
        round_while_paused(lambda: ray.get(dst.cancel_reservation.remote(999, None)), lambda: None)
        wait_for(engine, lambda e: e.stats()[0].num_moves_accepted == 1)
        engine.run()
        assert 1 in seqs[0].placement
        roomy = local_generate(MODEL, [s.prompt_ids for s in seqs], 24, EngineConfig(1, 64, block_size=4))
        assert [s.output_ids for s in seqs] == [t[:s.max_new_tokens] for s, t in zip(seqs, roomy.token_ids)]
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


def test_ray_systems_are_the_simulators_policies_over_the_same_rblocks():
    from reference_impl.backends.ray.serving import engine_config
    from reference_impl.errors import InputError
    from reference_impl.systems.catalog import DESIGNS, design

    configs = {system: engine_config(design(system), 3, 10, 8, seed=1) for system in DESIGNS
               if "ray" in design(system).real_backends}
    assert set(configs) == set(DESIGNS)  # every design runs on Ray
    for c in configs.values():  # every system holds the cluster's 30 rBlocks
        assert c.num_instances * c.blocks_per_instance == 30 and c.block_size == 8 and c.seed == 1
    assert (configs["infinite-llm"].num_instances, configs["infinite-llm"].pooling) == (3, True)
    assert (configs["vllm-m"].num_instances, configs["vllm-m"].pooling) == (3, False)
    assert (configs["vllm-s"].num_instances, configs["vllm-s"].pooling) == (1, False)
    for system in ("pd-disaggregation", "llumnix"):
        assert (configs[system].num_instances, configs[system].pooling) == (3, False)
    assert (configs["loongserve"].num_instances, configs["loongserve"].pooling) == (3, True)
    with pytest.raises(InputError, match="LoongServeKnobs"):
        engine_config(design("loongserve"), 3, 10, 8, knobs=object())


def test_dgfm_swap_while_the_loops_run_keeps_the_tokens():
    """A debt cycle (0's request lends on 1, 1's on 0) on full instances: the gManager's round plans a DGFM swap,
    the first instance carries it out while the other holds, the blocks travel, both requests end at home, and the
    tokens equal a roomy local run. Steps last 0.1 s of device time, so the requests are still running when the
    round comes (the instances run on their own: nothing else orders them)."""
    from reference_impl.model.device_time import DeviceTimeModel
    from reference_impl.control.protocol import MoveKVCache

    # exclusive_roles (infinite-llm 5.2) refuses the second lend of a cycle; distkv-llm's lend-and-borrow makes it
    config = EngineConfig(2, 6, block_size=4, exclusive_roles=False).without_gmanager_rounds()
    engine = RayEngine(config, DeviceTimeModel(0.1, MODEL))
    try:
        seqs = [Sequence(0, list(range(1, 10)), 7), Sequence(1, list(range(20, 29)), 7),
                Sequence(2, [4, 5, 6, 7, 8], 3), Sequence(3, [9, 8, 7, 6, 5], 3)]
        engine.add_request(seqs[0], 0)
        engine.add_request(seqs[1], 1)
        wait_for(engine, lambda e: seqs[0].output_ids and seqs[1].output_ids)
        engine.pause()
        try:  # two of each request's three rBlocks go to the other instance
            ray.get([engine.actors[0].move_kvcache.remote(MoveKVCache(0, 2, 1)),
                     engine.actors[1].move_kvcache.remote(MoveKVCache(1, 2, 0))])
            engine.sync_now()
        finally:
            engine.resume()
        wait_for(engine, lambda e: all(s.num_copied_blocks >= 2 for s in e.stats().values()))
        engine.pause()
        try:  # a request fills each instance, and the round finds the cycle
            assert spread(engine) and not any(s.output_ids[6:] for s in seqs[:2])
            engine.add_request(seqs[2], 0)
            engine.add_request(seqs[3], 1)
            engine.sync_now()
            ray.get(engine.gm_actor.run_round.remote())
        finally:
            engine.resume()
        engine.run()
        wait_for(engine, lambda e: e.stats()[0].num_swaps == 1)
        assert [s.placement for s in seqs[:2]] == [{0: 4}, {1: 4}]  # the swap brought both requests home
        roomy = local_generate(MODEL, [s.prompt_ids for s in seqs], 7, EngineConfig(1, 64, block_size=4))
        assert [s.output_ids for s in seqs] == [t[:s.max_new_tokens] for s, t in zip(seqs, roomy.token_ids)]
        assert_idle(engine)
    finally:
        engine.shutdown()


def test_an_instance_held_does_not_stop_one_that_shares_nothing_with_it():
    """No cluster-wide lockstep: while instance 0 holds at its iteration boundary (no control phase, no step),
    instance 1 serves its own requests to the end with the local backend's tokens; in lockstep it would wait for
    instance 0's control token at its first step."""
    engine = RayEngine(EngineConfig(2, 16, block_size=4, pooling=False), MODEL)
    try:
        ray.get(engine.actors[0].hold.remote("test"))
        seqs = [Sequence(i, list(p), NUM_NEW) for i, p in enumerate(PROMPTS[:2])]
        for seq in seqs:
            engine.add_request(seq, 1)
        wait_for(engine, lambda e: all(len(s.output_ids) == NUM_NEW for s in seqs))
        assert engine.snapshots[0].state in ("held", "starting")
        want = local_generate(MODEL, PROMPTS[:2], NUM_NEW, EngineConfig(1, 32, block_size=4), ignore_eos=True)
        assert [s.output_ids for s in seqs] == want.token_ids
        ray.get(engine.actors[0].unhold.remote("test"))
        late = Sequence(9, list(PROMPTS[0]), NUM_NEW)
        engine.add_request(late, 0)
        engine.run()
        assert late.output_ids == want.token_ids[0]
    finally:
        engine.shutdown()


def test_collect_answers_at_each_step_without_polling_the_actors():
    """The driver keeps one results call outstanding per instance: `collect` returns as soon as a step of 60 ms
    device time reports, with that step's tokens (a poll every 5 ms would have called the actor about 12 times
    a step), and with nothing to run it waits out `max_wait_s` and returns nothing."""
    from reference_impl.model.device_time import DeviceTimeModel

    engine = RayEngine(EngineConfig(1, 16, block_size=4, pooling=False), DeviceTimeModel(0.06))
    try:
        assert engine.collect(0.05) == []
        seq = Sequence(0, [1, 2, 3], 6)
        engine.add_request(seq)
        returns, t0 = [], time.perf_counter()
        while len(seq.output_ids) < 6:
            engine.collect(10.0)
            returns.append((time.perf_counter() - t0, len(seq.output_ids)))
        assert len(returns) <= 7  # one return per step, give or take the first
        assert returns[-1][0] < 6 * 0.06 + 1.0  # not the 10 s it was allowed to wait
        assert all(n > 0 for _, n in returns[1:])  # every return after the first brought tokens
        assert engine.collect(0.0) == [] and not engine.has_work
    finally:
        engine.shutdown()


def test_a_loop_waiting_on_a_reply_wakes_on_it_without_polling_ray():
    """A loop waiting on a peer's reply sleeps on its mailbox until the reply lands (a look at Ray every 0.5 ms
    cost a tenth of a core per waiting loop), answers its mail meanwhile, and goes on as soon as the reply is in."""
    from types import SimpleNamespace

    from reference_impl.backends.ray.loop import InstanceLoop
    from reference_impl.backends.ray.mailbox import Mailbox
    from reference_impl.backends.ray.stats import LoopStats

    @ray.remote
    def reply_after(seconds):
        time.sleep(seconds)
        return "done"

    box, mail, serves = Mailbox(), [], []
    serve = box.serve
    box.serve = lambda timeout_s=0.0: serves.append(timeout_s) or serve(timeout_s)
    loop = SimpleNamespace(mailbox=box, stats=LoopStats())
    loop.wait_refs = lambda refs: InstanceLoop.wait_refs(loop, refs)
    refs = [reply_after.remote(0.4), reply_after.remote(0.2)]
    ray.get(reply_after.remote(0.0))  # a worker is up: the wait below is the replies' own
    box.post(mail.append, "a peer's message")
    t0 = time.perf_counter()
    InstanceLoop.wait_refs(loop, refs)
    waited_s = time.perf_counter() - t0
    assert ray.get(refs) == ["done", "done"] and mail == ["a peer's message"]
    assert waited_s < 0.4 + 0.3
    assert len(serves) <= waited_s / 0.02 + 4  # woken by the replies, a look per 20 ms at most (not 800)
    assert InstanceLoop.wait_ref(loop, reply_after.remote(0.05)) == "done" and loop.stats.messaging_s > 0.04


def test_chunked_prefill_on_ray_gives_the_local_backends_tokens(local_run):
    """Steps that decode some requests and prefill prompt chunks of others, the long prompts' KV spread over
    instances: the tokens of whole-prompt prefill on the local backend."""
    from dataclasses import replace

    from reference_impl.backends.ray import generate as ray_generate

    result = ray_generate(MODEL, PROMPTS, NUM_NEW, replace(SPREAD, chunked_prefill_tokens=12), ignore_eos=True)
    assert result.token_ids == local_run.token_ids
    assert len(result.placement[2]) >= 2


def test_lamina_offloading_on_ray_matches_one_instance():
    """Lamina on the Ray backend (systems/lamina/local.py's Placement, handed to every instance actor): requests on
    the two compute instances, which hold no KV; every rBlock on the two memory instances, which compute its
    attention; the tokens of one local instance."""
    from reference_impl.systems.lamina.local import lamina_engine_config, offload_placement

    config = lamina_engine_config(EngineConfig(4, 16, block_size=4, seed=3))
    engine = RayEngine(config, MODEL, RayConfig(), placement=offload_placement(2), homes=(0, 1))
    holders = set()

    def watch(engine):
        holders.update(e.inst_id for s in engine.snapshots.values() for e in s.entries if e.num_blocks)
    try:
        seqs = [Sequence(i, list(p), NUM_NEW) for i, p in enumerate(PROMPTS)]
        homes = {engine.add_request(seq) for seq in seqs}  # dispatched among the compute instances only
        engine.run(on_poll=watch)
        want = local_generate(MODEL, PROMPTS, NUM_NEW, EngineConfig(1, 64, block_size=4), ignore_eos=True)
        assert [s.output_ids for s in seqs] == want.token_ids
        assert holders and holders <= {2, 3}  # KV only ever on the memory instances
        assert homes <= {0, 1}
        assert_idle(engine)
    finally:
        engine.shutdown()
