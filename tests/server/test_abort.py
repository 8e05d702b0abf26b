"""Scheduler.abort: a request dropped between steps leaves no rBlock, move or reservation anywhere, and the others'
tokens are those of a run without it."""
from reference_impl.backends.local import LocalBackend, generate
from reference_impl.control.engine import Engine, EngineConfig, GManagerConfig, step_clock
from reference_impl.control.sequence import Sequence
from reference_impl.model.llama import TINY, random_model

CONFIG = EngineConfig(num_instances=3, blocks_per_instance=6, block_size=4, gmanager=GManagerConfig(interval_s=2))
PROMPTS = [[(7 * i + j) % 500 + 2 for j in range(14 + 3 * i)] for i in range(5)]


def _abort(engine, req_id):
    return [s for inst in engine.instances if (s := inst.scheduler.abort(req_id)) is not None]


def _held(engine, req_id):
    return sum(rm.hosted.get(req_id, 0) + rm.reserved.get(req_id, 0) + (req_id in rm.tables)
               for rm in engine.rmanagers.values())


def test_abort_frees_local_and_borrowed_blocks():
    model = random_model(TINY, seed=0)
    engine = Engine(CONFIG, LocalBackend(model, CONFIG), clock=step_clock())  # a round every 2 steps
    seqs = [Sequence(i, list(p), 12) for i, p in enumerate(PROMPTS)]
    for seq in seqs:
        engine.add_request(seq)
    # run until some request holds rBlocks on an instance other than its home (borrowed)
    while not any(rm.num_borrowed for rm in engine.rmanagers.values()):
        engine.step()
        assert engine.num_steps < 50, "no request borrowed: the test's budget is too roomy"
    debtor = next(rm for rm in engine.rmanagers.values() if rm.num_borrowed)
    victim = next(r for r, h in debtor.holders_by_req.items() if set(h) - {debtor.inst_id})
    assert len(_abort(engine, victim)) == 1 and _held(engine, victim) == 0
    assert _abort(engine, victim) == []  # once only
    waiting = next((s.req_id for i in engine.instances for s in i.scheduler.waiting), None)
    if waiting is not None:
        assert len(_abort(engine, waiting)) == 1
    gone = {victim, waiting}
    engine.run()
    assert all(not i.has_work for i in engine.instances)
    assert all(rm.pool.num_used == 0 and not rm.reserved and not rm.tables and not rm.moves
               for rm in engine.rmanagers.values())
    kept = [i for i in range(len(PROMPTS)) if i not in gone]
    alone = generate(model, [PROMPTS[i] for i in kept], 12, CONFIG, clock=step_clock()).token_ids
    assert [seqs[i].output_ids for i in kept] == alone
