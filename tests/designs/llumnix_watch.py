"""A Llumnix run watched: the cluster's invariants (invariants.py) and the migrations' after every event. (Not a
test module, so its checks run at full speed: pytest rewrites only the asserts of test modules.)"""
from collections import Counter

from invariants import check_cluster
from reference_impl.systems.run import simulator


class Watch:
    """Runs a simulation with the invariants checked after every event that changed the cluster; `inject(sim,
    now_s)`, called first, may disturb the run between events."""

    def __init__(self, config, requests, inject=None):
        self.inject = inject
        self.outputs: dict[int, int] = {}  # req_id -> generated tokens so far
        self.paused: dict[int, int] = {}  # paused request -> its tokens when the pause began
        self.checked = None  # the cluster's change counts at the last check
        self.sim = simulator(config, requests, on_event=self.on_event)
        self.result = self.sim.run()

    def on_event(self, now_s: float) -> None:
        sim = self.sim
        if self.inject is not None:
            self.inject(sim, now_s)
        changes = (sim.changes.memory, sim.changes.queues)
        if changes == self.checked:
            return  # no rManager, queue or batch changed since the last check (most decode steps)
        self.checked = changes
        check_cluster(sim.engine)
        self.check_migrations()
        live = [seq for inst in sim.engine.instances for seq in inst.scheduler.running]
        for seq in live + [m.seq for m in sim.policy.migrator.active.values()]:
            assert len(seq.output_ids) >= self.outputs.get(seq.req_id, 0), "a token was lost"
            self.outputs[seq.req_id] = len(seq.output_ids)

    def check_migrations(self) -> None:
        migrator, engine = self.sim.policy.migrator, self.sim.engine
        busy = Counter()
        for req_id, m in migrator.active.items():
            assert m.src != m.dst and m.seq.req_id == req_id
            busy[m.src] += 1
            busy[m.dst] += 1
            assert req_id not in engine.instances[m.dst].rm.tables, "a migrating request is homed on its destination"
            if m.paused_at_s is not None:  # out of every batch, still homed on the source, generating nothing
                assert not any(m.seq in i.scheduler.running for i in engine.instances)
                assert req_id in engine.instances[m.src].rm.tables
                assert self.paused.setdefault(req_id, len(m.seq.output_ids)) == len(m.seq.output_ids)
        self.paused = {r: n for r, n in self.paused.items() if r in migrator.active}
        assert busy == Counter({i: n for i, n in enumerate(migrator.num_busy) if n})
        assert all(n <= migrator.knobs.max_migrations_per_instance for n in busy.values()), "an instance chosen while busy"
        for inst in engine.instances:  # reserved room is promised to a migration into that instance, no more than it moves
            for req_id, n in inst.rm.reserved.items():
                m = migrator.active.get(req_id)
                assert m is not None and m.dst == inst.inst_id, f"room reserved on {inst.inst_id} for no migration"
                src_rm = engine.instances[m.src].rm
                assert req_id not in src_rm.tables or n <= len(src_rm.tables[req_id])

    def check_end(self) -> None:
        """Every request finished with all its tokens, each generated once; nothing left migrating or reserved."""
        sim, result = self.sim, self.result
        assert all(r.status == "finished" for r in result.requests)
        assert all(len(seq.output_ids) == seq.max_new_tokens for seq in sim.seqs.values())
        assert sum(result.step_tokens) == sum(len(seq.output_ids) for seq in sim.seqs.values())
        assert not sim.policy.migrator.active and not any(i.rm.reserved for i in sim.engine.instances)
        c = result.design_counters
        assert c["migrations_started"] == c["migrations_completed"] + c["migrations_aborted"]
