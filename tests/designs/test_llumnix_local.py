"""Llumnix's migration on the local backend: requests moved whole mid-decode (control/request_move.py: their KV
copied block for block between the instances' real caches, their Sequence into the other batch) generate the tokens
of transformers' LlamaForCausalLM, and of the same engine with no move."""
import os

import pytest
import torch

from reference_impl.backends.local import generate
from reference_impl.control.engine import EngineConfig
from reference_impl.control.request_move import move_request
from reference_impl.model.llama import load_model

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # everything is local: never reach the Hub
transformers = pytest.importorskip("transformers")

PROMPTS = [[5, 90, 13, 2, 77, 41, 8, 120, 33], [64, 3, 3, 101, 27, 9, 58, 11, 96, 20, 7]]
NUM_NEW = 40
MOVE_AFTER_STEPS = (3, 9, 22)  # mid-decode, several times: each request goes round the instances


@pytest.fixture(scope="module")
def hf_folder(save_hf_llama):
    return save_hf_llama("llama_moves", 99, vocab_size=128, hidden_size=48, intermediate_size=112)


def transformers_tokens(folder, prompt) -> list[int]:
    model = transformers.LlamaForCausalLM.from_pretrained(folder, attn_implementation="eager").float().eval()
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), max_new_tokens=NUM_NEW, min_new_tokens=NUM_NEW, do_sample=False,
                             pad_token_id=0)
    return out[0, len(prompt):].tolist()


def test_requests_moved_mid_decode_match_transformers(hf_folder):
    model = load_model(hf_folder)
    config = EngineConfig(3, 24, block_size=4, pooling=False)  # KV whole on one instance, as Llumnix keeps it
    moves = []

    def migrate(engine):
        if engine.num_steps not in MOVE_AFTER_STEPS:
            return
        running = [(inst, seq) for inst in engine.instances for seq in inst.scheduler.running]
        for src, seq in running:
            dst = engine.instances[(src.inst_id + 1) % len(engine.instances)]
            pairs = move_request(src, dst, seq, engine.backend.copy_blocks)
            moves.append((seq.req_id, src.inst_id, dst.inst_id, len(pairs), len(seq.output_ids)))

    staying = generate(model, PROMPTS, NUM_NEW, config, ignore_eos=True, record_logits=True)
    moving = generate(model, PROMPTS, NUM_NEW, config, ignore_eos=True, record_logits=True, on_step=migrate)
    assert len(moves) == len(PROMPTS) * len(MOVE_AFTER_STEPS)
    assert all(0 < num_out < NUM_NEW and num_blocks > 1 for *_, num_blocks, num_out in moves)  # mid-decode
    for i, prompt in enumerate(PROMPTS):
        assert moving.token_ids[i] == transformers_tokens(hf_folder, prompt) == staying.token_ids[i]
        assert len(moving.placement[i]) == 1  # it finished with its KV whole on one instance
        for a, b in zip(moving.logits[i], staying.logits[i]):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=0)


def test_live_migration_with_precopy_stages_matches_transformers(hf_folder):
    """systems/llumnix/local.py: each request migrates by pre-copy stages read while it keeps decoding on its source,
    then the pause and the move; the destination's KV is what the stages read, and the tokens and logits are those of
    the run with no migration and of transformers."""
    from reference_impl.systems.llumnix.knobs import LlumnixKnobs
    from reference_impl.systems.llumnix.local import LocalMigrator

    model = load_model(hf_folder)
    config = EngineConfig(3, 24, block_size=4, pooling=False)
    knobs = LlumnixKnobs(last_stage_max_tokens=4, max_stages=20)  # the last stage at one rBlock: stages before it
    held = {}

    def migrate(engine):
        migrator = held.setdefault("m", LocalMigrator(engine, knobs))
        if engine.num_steps == 3:
            for src in engine.instances:
                for seq in src.scheduler.running:
                    migrator.start(seq, src.inst_id, (src.inst_id + 1) % len(engine.instances))
        migrator.after_step(engine)

    staying = generate(model, PROMPTS, NUM_NEW, config, ignore_eos=True, record_logits=True)
    moving = generate(model, PROMPTS, NUM_NEW, config, ignore_eos=True, record_logits=True, on_step=migrate)
    c = held["m"].counters
    assert c.started == c.completed == len(PROMPTS) and not c.aborted
    assert c.precopy_rounds >= len(PROMPTS)  # every migration copied while its request decoded
    for i, prompt in enumerate(PROMPTS):
        assert moving.token_ids[i] == transformers_tokens(hf_folder, prompt) == staying.token_ids[i]
        assert len(moving.placement[i]) == 1
        for a, b in zip(moving.logits[i], staying.logits[i]):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
