"""Engine behaviour on the tiny model: preemption by recompute, long prompts across instances, EOS,
gManager failover, and proactive moves by Algorithm 1, all with unchanged tokens."""
import torch

from reference_impl.backends.local import LocalBackend, generate
from reference_impl.control.engine import Engine, EngineConfig, GManagerConfig, step_clock
from reference_impl.model.llama import TINY, ModelConfig, contiguous_attention, random_model
from reference_impl.control.sequence import Sequence

MODEL = random_model(TINY, seed=3)
PROMPTS = [[7, 300, 12, 9, 44], list(range(100, 131)), [1]]


def reference_tokens(prompt, num_new):
    """Full recompute with contiguous causal attention: no cache at all."""
    ids, out = list(prompt), []
    for _ in range(num_new):
        pos = torch.arange(len(ids))
        hidden = MODEL.forward(torch.tensor(ids), pos, lambda layer, q, k, v: contiguous_attention(q, k, v, pos, pos))
        out.append(int(MODEL.logits(hidden[-1:])[0].argmax()))
        ids.append(out[-1])
    return out


def test_roomy_engine_matches_recompute():
    result = generate(MODEL, PROMPTS, 12, EngineConfig(1, 64, block_size=4), ignore_eos=True)
    assert result.token_ids == [reference_tokens(p, 12) for p in PROMPTS]


def test_preemption_without_pooling_recomputes_to_the_same_tokens():
    roomy = generate(MODEL, PROMPTS, 16, EngineConfig(1, 64, block_size=4), ignore_eos=True)
    tight = generate(MODEL, PROMPTS, 16, EngineConfig(1, 13, block_size=4, pooling=False), ignore_eos=True)
    assert tight.num_preemptions > 0
    assert tight.token_ids == roomy.token_ids
    assert all(list(p) == [0] for p in tight.placement)  # KV never left the instance


def test_long_prompt_prefill_spans_instances():
    prompt = list(range(1, 61))  # 15 blocks of 4 tokens; each instance holds 6
    roomy = generate(MODEL, [prompt], 6, EngineConfig(1, 64, block_size=4), ignore_eos=True, record_logits=True)
    spread = generate(MODEL, [prompt], 6, EngineConfig(3, 6, block_size=4).without_gmanager_rounds(),
                      ignore_eos=True, record_logits=True)
    assert len(spread.placement[0]) == 3
    assert spread.token_ids == roomy.token_ids
    torch.testing.assert_close(torch.stack(spread.logits[0]), torch.stack(roomy.logits[0]), atol=1e-4, rtol=0)


def test_eos_stops_a_request():
    free_run = generate(MODEL, PROMPTS[:1], 10, EngineConfig(1, 64, block_size=4), ignore_eos=True)
    eos = free_run.token_ids[0][3]
    model = random_model(ModelConfig(eos_token_id=eos), seed=3)
    stopped = generate(model, PROMPTS[:1], 10, EngineConfig(1, 64, block_size=4))
    assert stopped.token_ids[0] == free_run.token_ids[0][: free_run.token_ids[0].index(eos) + 1]


def test_gmanager_restart_rebuilds_the_map_mid_run():
    config = EngineConfig(3, 8, block_size=4, gmanager=GManagerConfig(interval_s=2))
    engine = Engine(config, LocalBackend(MODEL, config), clock=step_clock())  # a round every second step
    for i, p in enumerate(PROMPTS):
        engine.add_request(Sequence(i, p, 10))
    checked = []

    def restart(engine):
        if engine.num_steps % 5 == 0 and engine.has_work:
            engine.heartbeats()
            before = engine.gmanager.placement_map()
            engine.restart_gmanager()
            assert engine.gmanager.placement_map() == before
            checked.append(len(before))

    engine.run(on_step=restart)
    assert checked and max(checked) > 0
    roomy = generate(MODEL, PROMPTS, 10, EngineConfig(1, 64, block_size=4))
    assert [s.output_ids for s in sorted(engine.finished, key=lambda s: s.req_id)] == roomy.token_ids


def test_algorithm1_moves_a_long_request_off_a_saturated_debtor():
    """Instance 0: one long request filling it and a queue; instance 1: a busy batch with room. The round
    offloads part of the long request to instance 1 and the tokens do not change."""
    config = EngineConfig(2, 24, block_size=4, dgfm=False, gmanager=GManagerConfig(interval_s=None, beta_thres=2))
    engine = Engine(config, LocalBackend(MODEL, config))
    long_prompt = list(range(1, 89))  # 22 of instance 0's 24 blocks
    engine.instances[0].scheduler.add(Sequence(0, long_prompt, 6))
    shorts = [[5, 6], [7], [8, 9], [3]]
    for i, p in enumerate(shorts):
        engine.instances[1].scheduler.add(Sequence(1 + i, p, 6))
    engine.step()
    queued = [[9] * 8] * 3
    for i, p in enumerate(queued):
        engine.instances[0].scheduler.add(Sequence(5 + i, p, 6))
    engine.heartbeats()
    assert engine.gmanager_round() > 0
    assert engine.instances[0].rm.moves and engine.instances[0].rm.moves[0].dst_inst == 1
    engine.run()
    finished = sorted(engine.finished, key=lambda s: s.req_id)
    assert 1 in finished[0].placement
    roomy = generate(MODEL, [long_prompt] + shorts + queued, 6, EngineConfig(1, 64, block_size=4))
    assert [s.output_ids for s in finished] == roomy.token_ids
