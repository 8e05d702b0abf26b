"""LoongServe's placement and multi-master decode on the local engine (real model, real KV): a prompt larger than
its master is placed over idle instances at admission, decodes scale up onto further instances without moving old
KV, and every token equals transformers' greedy generation (the reference of tests/engine). Both rules: the
simulator's (it reads the engine) and the real backends' (the design's EngineRun, read through the peers, its groups
chosen by LoongServe's analytic model on the engine's cost model)."""

from collections import Counter

from reference_impl.backends.local import LocalBackend
from reference_impl.control.engine import Engine, EngineConfig
from reference_impl.control.sequence import Sequence
from reference_impl.model.llama import load_model
from reference_impl.systems.loongserve import loongserve_engine
from reference_impl.systems.catalog import design
from reference_impl.systems.loongserve.placement import LoongServePlacement

from test_loongserve_peers import a100_model

from tiny_cases import NUM_NEW, hf_folder, hf_greedy  # noqa: F401  (hf_folder: a fixture)

BLOCK, BLOCKS = 4, 12  # 48 tokens an instance: the first prompt needs two, decoding needs more
PROMPTS = [[(7 * i + 3) % 256 for i in range(60)], [200, 1, 45, 45, 9, 130, 7, 88, 19, 240, 66, 3, 14, 90]]


def run_engine(model, config, placement_of, perf_model=None, **backend):
    """The prompts to the end on `config`'s engine (its cost model `perf_model`), its placement
    `placement_of(the engine's getter)`; (requests, each request's holders after each step, its table's instances
    after its prefill, the backend)."""
    engine = Engine(config, LocalBackend(model, config, **backend), perf_model=perf_model,
                    placement=placement_of(lambda: engine))
    seqs = [Sequence(i, list(p), NUM_NEW) for i, p in enumerate(PROMPTS)]
    for seq in seqs:
        engine.add_request(seq)
    holders, prefilled = {}, {}  # req_id -> instances holding its KV after each step; its blocks' instances

    def watch(engine):
        for rm in engine.rmanagers.values():
            for req_id in rm.tables:
                holders.setdefault(req_id, []).append(set(rm.holders(req_id)))
                prefilled.setdefault(req_id, [b.inst_id for b in rm.tables[req_id]])
    engine.run(on_step=watch)
    assert engine.num_swaps == 0 and not any(rm.moves for rm in engine.rmanagers.values())
    return seqs, holders, prefilled, engine.backend


def test_split_kv_decodes_as_transformers(hf_folder):
    """The simulator's rules (they read the engine): the prompt fills its master, then spills onto idle ones."""
    model = load_model(hf_folder)
    config = loongserve_engine(EngineConfig(4, BLOCKS, block_size=BLOCK))
    seqs, holders, _, _ = run_engine(model, config, lambda engine_of: LoongServePlacement(engine_of).rules())
    assert len(holders[0][0]) >= 2  # placed over instances at admission: the prompt is larger than its master
    assert len(holders[0][-1]) > len(holders[0][0])  # and scaled up as it decoded
    assert all(a <= b for a, b in zip(holders[0], holders[0][1:]))  # old KV never left an instance
    for seq, prompt in zip(seqs, PROMPTS):
        assert seq.output_ids == hf_greedy(hf_folder, prompt)[0]


def test_sequence_parallel_prefill_decodes_as_transformers(hf_folder):
    """The design's real run (read through the peers): each prompt split evenly over its group, one run of rBlocks
    per member in token order, prefilled sequence-parallel (each member, a thread here, computes its segment through
    the layers, writes its KV to its own rBlocks and attends its own and the earlier segments' KV, partials merged
    with ScaleReduce: backends/sp_prefill.py); transformers' tokens. The cost model is one where LoongServe's
    analytic model splits such prompts (attention-bound: test_loongserve_peers.py)."""
    model = load_model(hf_folder)
    run = design("loongserve").real_run("local", 4, BLOCKS, BLOCK)
    assert (run.homes, run.moves) == (None, None) and run.placement.segments is not None
    seqs, holders, prefilled, backend = run_engine(model, run.config, lambda _: run.placement, a100_model(2000.0),
                                                   sequence_parallel=True)
    for req_id, blocks in prefilled.items():
        runs = [blocks[0]] + [b for a, b in zip(blocks, blocks[1:]) if a != b]
        assert len(runs) == len(set(runs))  # one contiguous segment per member
        shares = [blocks.count(i) for i in runs]
        assert max(shares) - min(shares) <= 1  # even, in whole rBlocks
    assert len(set(prefilled[0])) >= 2  # the long prompt prefilled by a group ...
    # ... computed by its members: every split prompt counted by its group's size (a recompute after a preemption
    # prefills again)
    split = Counter(len(set(b)) for b in prefilled.values() if len(set(b)) > 1)
    assert set(backend.sp_degrees) >= set(split) and backend.sp_degrees.total() >= split.total()
    assert all(a <= b for a, b in zip(holders[0], holders[0][1:]))  # old KV never left an instance
    for seq, prompt in zip(seqs, PROMPTS):
        assert seq.output_ids == hf_greedy(hf_folder, prompt)[0]


def test_no_split_where_the_analytic_model_keeps_the_master_alone(hf_folder):
    """On an A100's cost model these prompts are too short for a ring to pay: each is prefilled by its master alone
    (the long one's KV fills its master and spills onto an idle instance, as the rManager admits it, in place of an
    even split over the group), and the tokens are transformers'."""
    model = load_model(hf_folder)
    run = design("loongserve").real_run("local", 4, BLOCKS, BLOCK)
    seqs, _, prefilled, _ = run_engine(model, run.config, lambda _: run.placement, a100_model(),
                                       sequence_parallel=True)
    assert len(set(prefilled[1])) == 1
    assert prefilled[0].count(prefilled[0][0]) == BLOCKS and len(set(prefilled[0])) == 2
    for seq, prompt in zip(seqs, PROMPTS):
        assert seq.output_ids == hf_greedy(hf_folder, prompt)[0]
