"""LoongServe's placement and multi-master decode on the local engine (real model, real KV): a prompt larger than
its master is placed over idle instances at admission, decodes scale up onto further instances without moving old
KV, and every token equals transformers' greedy generation (the reference of tests/engine). Both rules: the
simulator's (it reads the engine) and the real backends' (the design's EngineRun, read through the peers)."""
import pytest

from reference_impl.backends.local import LocalBackend
from reference_impl.control.engine import Engine, EngineConfig
from reference_impl.control.sequence import Sequence
from reference_impl.model.llama import load_model
from reference_impl.systems.loongserve import loongserve_engine
from reference_impl.systems.catalog import design
from reference_impl.systems.loongserve.placement import LoongServePlacement

from tiny_cases import NUM_NEW, hf_folder, hf_greedy  # noqa: F401  (hf_folder: a fixture)

BLOCK, BLOCKS = 4, 12  # 48 tokens an instance: the first prompt needs two, decoding needs more
PROMPTS = [[(7 * i + 3) % 256 for i in range(60)], [200, 1, 45, 45, 9, 130, 7, 88, 19, 240, 66, 3, 14, 90]]


@pytest.mark.parametrize("rules", ["engine", "peers"])
def test_split_kv_decodes_as_transformers(hf_folder, rules):
    model = load_model(hf_folder)
    if rules == "engine":
        config = loongserve_engine(EngineConfig(4, BLOCKS, block_size=BLOCK))
        placement = LoongServePlacement(lambda: engine).rules()
    else:
        run = design("loongserve").real_run("local", 4, BLOCKS, BLOCK)
        config, placement = run.config, run.placement
        assert (run.homes, run.moves) == (None, None)
    engine = Engine(config, LocalBackend(model, config), placement=placement)
    seqs = [Sequence(i, list(p), NUM_NEW) for i, p in enumerate(PROMPTS)]
    for seq in seqs:
        engine.add_request(seq)
    holders = {}  # req_id -> instances holding its KV after each step

    def watch(engine):
        for rm in engine.rmanagers.values():
            for req_id in rm.tables:
                holders.setdefault(req_id, []).append(set(rm.holders(req_id)))
    engine.run(on_step=watch)
    assert len(holders[0][0]) >= 2  # placed over instances at admission: the prompt is larger than its master
    assert len(holders[0][-1]) > len(holders[0][0])  # and scaled up as it decoded
    assert all(a <= b for a, b in zip(holders[0], holders[0][1:]))  # old KV never left an instance
    assert engine.num_swaps == 0 and not any(rm.moves for rm in engine.rmanagers.values())
    for seq, prompt in zip(seqs, PROMPTS):
        assert seq.output_ids == hf_greedy(hf_folder, prompt)[0]
