"""What the engine loop drives: the local Engine (instances in this process, stepped here) or the Ray engine (each
instance an actor running its own loop; a "step" here collects what they reported). Both take requests, abort
them (every rBlock they hold freed: Scheduler.abort here, the actors' Abort message there), say what they hold,
and keep the caller's Sequence objects up to date with their tokens; `release` forgets a request whose result
the loop has delivered (a server runs for ever)."""
from dataclasses import dataclass, field

ABORTED = "aborted by the server (client gone or stop string)"
RAY_COLLECT_S = 0.05  # the longest a Ray collection waits for an instance to report a step


@dataclass
class EngineStats:
    """What the engine holds now (read in the loop's thread, between steps)."""
    num_running: int
    num_waiting: int
    num_live: int
    rblocks_used: int
    rblocks_reserved: int
    rblocks_lent: int
    rblocks_borrowed: int
    num_tables: int
    num_moves: int
    held_by_req: dict = field(default_factory=dict)  # req_id -> rBlocks (local backend only)


@dataclass(frozen=True, slots=True)
class Gauges:
    num_running: int
    num_waiting: int
    rblocks_used: int
    rblocks_capacity: int
    rblocks_lent: int
    rblocks_borrowed: int
    remote_attention_bytes: int = 0  # so far (a counter's value)


class _Driver:
    """What both drivers read and do the same way: their `engine`'s work and its requests' entry."""

    @property
    def has_work(self) -> bool:
        return self.engine.has_work

    def add(self, seq) -> None:
        self.engine.add_request(seq)


class LocalDriver(_Driver):
    """The local Engine: `--instances` in this process, KV pooled, stepped by the loop's thread."""
    gmanager_rounds_counted = True

    def __init__(self, run, model):
        """run: control/engine_run.py's EngineRun with no homes and no move rule (its config and placement)."""
        from reference_impl.backends.local import LocalBackend, to_device
        from reference_impl.control.engine import Engine
        config = run.config
        backend = LocalBackend(to_device(model, "cpu"), config, sequence_parallel=run.placement.segments is not None)
        self.engine = Engine(config, backend, placement=run.placement)
        c = model.config
        # DistAttention per layer and remote holder of a decoding request: the query out, (out, lse) back
        self.remote_bytes_per_holder = c.num_layers * (2 * c.num_heads * c.head_dim * model.dtype.itemsize
                                                       + 4 * c.num_heads)
        self.remote_attention_bytes = 0

    def abort(self, req_id: int) -> None:
        for inst in self.engine.instances:
            if inst.scheduler.abort(req_id) is not None:
                return

    def step(self) -> int:
        """One engine step; the gManager rounds it ran (0 or 1)."""
        engine, rounds = self.engine, self.engine.num_rounds
        decoding = [(inst, seq, len(seq.output_ids)) for inst in engine.instances for seq in inst.scheduler.running]
        engine.step()
        engine.finished.clear()  # (the engine keeps every finished request; a server must not)
        for inst, seq, before in decoding:  # those that made a token this step: a decode over their tables
            if len(seq.output_ids) == before + 1:
                holders = inst.rm.holders_by_req.get(seq.req_id) or seq.placement
                self.remote_attention_bytes += self.remote_bytes_per_holder * sum(i != inst.inst_id for i in holders)
        return engine.num_rounds - rounds

    def failed(self) -> dict[int, str]:
        return {}

    def release(self, req_id: int) -> None:
        pass  # the engine keeps nothing of a finished or aborted request (step clears engine.finished)

    def gauges(self) -> Gauges:
        rms = self.engine.rmanagers.values()
        return Gauges(sum(len(i.scheduler.running) for i in self.engine.instances),
                      sum(len(i.scheduler.waiting) for i in self.engine.instances),
                      sum(rm.pool.num_used for rm in rms), sum(rm.pool.num_capacity for rm in rms),
                      sum(rm.num_lent for rm in rms), sum(rm.num_borrowed for rm in rms), self.remote_attention_bytes)

    def stats(self, num_live: int) -> EngineStats:
        rms = self.engine.rmanagers.values()
        held: dict[int, int] = {}
        for rm in rms:
            for req_id, n in rm.hosted.items():
                held[req_id] = held.get(req_id, 0) + n
        g = self.gauges()
        return EngineStats(g.num_running, g.num_waiting, num_live, g.rblocks_used, sum(rm.num_reserved for rm in rms),
                           g.rblocks_lent, g.rblocks_borrowed, sum(len(rm.tables) for rm in rms),
                           sum(len(rm.moves) for rm in rms), held)

    def close(self) -> None:
        pass


class RayDriver(_Driver):
    """The Ray engine (backends/ray/): the instances step by themselves; the driver dispatches and collects."""
    gmanager_rounds_counted = False  # the gManager actor runs its rounds on its own timer

    def __init__(self, run, model, ray_config):
        """run: control/engine_run.py's EngineRun (a design's config, placement, homes and move rule)."""
        from reference_impl.backends.ray import RayEngine, init_ray
        self.started = init_ray(ray_config)
        self.engine = RayEngine(run.config, model, ray_config, placement=run.placement, homes=run.homes,
                                moves=run.moves)

    def abort(self, req_id: int) -> None:
        engine = self.engine
        if req_id not in engine.mirror or req_id in engine.done or req_id in engine.failed:
            return
        engine.delivered()  # its AddRequest in its actor's inbox first (the actors are threaded)
        engine.failed[req_id] = ABORTED
        engine.undelivered.append(engine.actors[engine.home_of[req_id]].abort.remote(req_id))

    def step(self) -> int:
        self.engine.collect(RAY_COLLECT_S)
        return 0

    def failed(self) -> dict[int, str]:
        return {r: why for r, why in self.engine.failed.items() if why != ABORTED}

    def release(self, req_id: int) -> None:
        self.engine.release(req_id)

    def gauges(self) -> Gauges:
        snaps = self.engine.snapshots.values()
        capacity = self.engine.config.blocks_per_instance_total * len(self.engine.actors)
        return Gauges(sum(s.num_running for s in snaps), sum(s.num_waiting for s in snaps),
                      sum(s.num_used for s in snaps), capacity, 0, 0)

    def stats(self, num_live: int) -> EngineStats:
        self.engine.delivered()
        self.engine.poll()
        usage = self.engine.usage().values()
        g = self.gauges()
        return EngineStats(g.num_running, g.num_waiting, num_live, sum(u["num_used"] for u in usage),
                           sum(sum(u["reserved"].values()) for u in usage), 0, 0,
                           sum(u["num_tables"] for u in usage), sum(u["num_moves"] for u in usage))

    def close(self) -> None:
        self.engine.shutdown()
        if self.started:
            import ray
            ray.shutdown()
