"""The driver of the Ray backend: it starts the actors, dispatches arrivals and collects tokens; it runs no step.

Each instance actor runs its own serving loop (loop.py), the gManager actor its own rounds
(gmanager.py). Dispatch is the engine's rule (the instance with the most free memory, engine.py), on the
instances' latest published status plus what was sent to them since.

Failures: a gManager that Ray restarts is rebuilt from full heartbeats (the instances notice its new boot id).
A dead instance breaks the data-plane group: its partners' transfers fail, the driver sees it gone, forms a new
group of the survivors (each joins at its next iteration boundary), the survivors recompute their running
requests and free what the dead instance's requests held, and the requests homed on it are re-dispatched with
the tokens generated so far (or fail with a reason when they no longer fit).
"""
import time
from dataclasses import replace

import ray
from ray.exceptions import GetTimeoutError, RayActorError
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from reference_impl.backends.ray.actor import InstanceActor
from reference_impl.backends.ray.cluster import RayConfig
from reference_impl.backends.ray.dataplane import GroupSpec
from reference_impl.backends.ray.gmanager import GManagerActor
from reference_impl.backends.ray.messages import Migrate
from reference_impl.backends.ray.snapshot import BROKEN, Dispatched, Snapshot
from reference_impl.backends.ray.stats import LoopStats
from reference_impl.control.engine import EngineConfig
from reference_impl.errors import InputError
from reference_impl.control.gmanager import GManagerConfig
from reference_impl.control.placement import Placement
from reference_impl.model.llama import LlamaModel
from reference_impl.control.sequence import Sequence, Status, num_blocks_for

DEATH_GRACE_S = 5.0  # a broken data-plane group with every instance alive this long is a bug, not a failure
STALL_S = 5.0  # nothing runs anywhere while requests wait this long: the memory budget cannot admit them
RESULT_HOLD_S = 0.1  # an instance with nothing to report answers the driver's results call after this long


class RayEngine:
    """Instances and the gManager as Ray actors; `shutdown()` ends them."""

    def __init__(self, config: EngineConfig, model: LlamaModel, ray_config: RayConfig = RayConfig(), *,
                 gmanager_config: GManagerConfig | None = None, perf_model=None, placement: Placement = Placement(),
                 homes: tuple[int, ...] | None = None, moves=None):
        """gmanager_config: the gManager's knobs in place of `config.gmanager`; perf_model: the cost model its
        Algorithm 1 reads (and a placement that prices the machine: Placement.priced); placement: a design's
        placement rules, given to every instance as it is built; homes: the instances `add_request` dispatches to
        (None: all; Lamina's: its compute instances; prefill/decode
        disaggregation's: its prefill instances); moves: a design's rule for moving running requests whole between
        instances, given to every instance as it is built (control/request_move.py RequestMoves; None: none)."""
        self.config = config
        self.ray_config = rc = ray_config
        self.mirror: dict[int, Sequence] = {}  # req_id -> the caller's Sequence, tokens mirrored as they come
        self.home_of: dict[int, int] = {}
        self.failed: dict[int, str] = {}  # req_id -> why it could not finish
        self.done: set[int] = set()
        self.num_instance_failures = 0
        self.sent: dict[int, Dispatched] = {}  # inst_id -> what was dispatched to it that its snapshot lacks
        self.snapshots: dict[int, Snapshot] = {}
        # add/abort calls not yet known to be in their actor's inbox: the actors are threaded, so a later call
        # (sync_now, pause) may run before them; `delivered()` waits for these
        self.undelivered: list[ray.ObjectRef] = []
        self.waiting: dict[int, tuple] = {}  # inst_id -> (its outstanding results call, when it was made)
        bundle = {"CPU": rc.cpus_per_instance, **({"GPU": rc.gpus_per_instance} if rc.gpus_per_instance else {})}
        self.pg = placement_group([dict(bundle) for _ in range(config.num_instances)], rc.placement_strategy)
        self.actors, self.gm_actor = {}, None
        try:
            ray.get(self.pg.ready(), timeout=rc.timeout_s)
        except GetTimeoutError:
            self.shutdown()
            raise InputError(f"the Ray cluster cannot place {config.num_instances} instances of {bundle} "
                             f"({rc.placement_strategy}) within {rc.timeout_s:.0f} s; "
                             f"see `ray status`, or lower --instances") from None
        model_ref = ray.put(model)
        placement = placement.for_cost_model(perf_model)
        gm_config = config if gmanager_config is None else replace(config, gmanager=gmanager_config)
        device = "cuda" if rc.gpus_per_instance else "cpu"
        self.actors = {i: InstanceActor.options(
            num_cpus=rc.cpus_per_instance, num_gpus=rc.gpus_per_instance,
            scheduling_strategy=PlacementGroupSchedulingStrategy(self.pg, placement_group_bundle_index=i),
        ).remote(i, model_ref, config, device, (gm_config.gmanager.interval_s or 0.0) / 2, placement, moves)
            for i in range(config.num_instances)}
        interval_s = gm_config.gmanager.interval_s if gm_config.runs_gmanager_rounds else 0.0
        self.gm_actor = GManagerActor.options(max_restarts=-1, num_cpus=0).remote(
            gm_config, perf_model, self.actors, interval_s, config.dgfm, config.seed)
        self.backend = "nccl" if rc.gpus_per_instance else "gloo"
        spec = self._group_spec(sorted(self.actors))
        self.group = spec.address  # the data-plane group of the live instances: a failure in an older one is known
        # the gManager alive too before anything runs: Ray drops a kill sent while an actor is still being created
        ray.get([a.start.remote(self.actors, self.gm_actor, spec) for a in self.actors.values()]
                + [self.gm_actor.get_boot_id.remote()])
        self.sent = {i: Dispatched() for i in self.actors}
        self.homes = tuple(self.actors) if homes is None else tuple(homes)
        self.placement_blocks = placement.blocks
        self.room_blocks = config.room_blocks(placement.blocks, self.homes)  # the most one request may hold

    def _group_spec(self, members: list[int]) -> GroupSpec:
        address = ray.get(self.actors[members[0]].free_address.remote())
        return GroupSpec(address, tuple(members), self.backend, self.ray_config.dist_timeout_s)

    # --- dispatch and results
    def add_request(self, seq: Sequence, inst_id: int | None = None) -> int:
        """Dispatch as `Engine.add_request` (or to `inst_id`); the actor gets a copy, `seq` receives its tokens."""
        self.config.check_fits(seq, self.room_blocks)
        blocks = num_blocks_for(seq.num_tokens, self.config.block_size)
        if inst_id is None:
            inst_id = max((i for i in self.homes if i in self.actors), key=lambda i: (self._free_blocks(i), -i))
        self.mirror[seq.req_id] = seq
        self.home_of[seq.req_id] = inst_id
        self.sent[inst_id].add(blocks)
        self.undelivered.append(self.actors[inst_id].add_request.remote(seq))
        return inst_id

    def migrate(self, req_id: int, dst: int, *, last_stage_blocks: int = 1, max_stages: int = 3) -> None:
        """Ask the home of running request `req_id` to migrate it live to instance `dst` (migration.py: pre-copy
        stages while it decodes, the pause once at most `last_stage_blocks` are left, an abort past `max_stages`)."""
        msg = Migrate(req_id, dst, last_stage_blocks, max_stages)
        self.undelivered.append(self.actors[self.home_of[req_id]].migrate.remote(msg))

    def _free_blocks(self, inst_id: int) -> float:
        snap = self.snapshots.get(inst_id, Snapshot())
        status, unseen = snap.status, self.sent[inst_id].unseen_blocks(snap.num_added)
        if status is None:
            return self.config.blocks_per_instance_total - unseen
        return status.num_free_blocks - status.num_waiting * status.mean_waiting_blocks - unseen

    def delivered(self) -> None:
        """Return once every request added (or aborted) so far is in its instance's inbox, or its actor died."""
        ray.wait(self.undelivered, num_returns=len(self.undelivered), timeout=self.ray_config.timeout_s)
        self.undelivered = []

    def poll(self) -> list[Sequence]:
        """Collect new tokens and finished requests from every instance now (a fresh view of all of them);
        recover from a failure if one shows."""
        self._settle_undelivered()
        # the outstanding results calls first: they may hold tokens taken before the ones asked for now
        waiting, self.waiting = self.waiting, {}
        results = {i: ref for i, (ref, _) in waiting.items()}
        finished, broken = self._take(results)
        calls = {i: a.take_results.remote() for i, a in self.actors.items()}
        more, broken_now = self._take(calls)
        if broken or broken_now:
            self.recover()
        return finished + more

    def collect(self, max_wait_s: float) -> list[Sequence]:
        """New tokens and finished requests as the instances report their steps: returns once one has reported,
        or after `max_wait_s`. One results call is outstanding per instance and answers at that instance's next
        step (or after RESULT_HOLD_S), so the driver neither polls the actors nor sleeps past a step's end."""
        self._settle_undelivered()
        now = time.monotonic()
        for inst_id, actor in self.actors.items():
            if inst_id not in self.waiting:
                self.waiting[inst_id] = (actor.wait_results.remote(RESULT_HOLD_S), now)
        by_ref = {ref: i for i, (ref, _) in self.waiting.items()}
        ready, _ = ray.wait(list(by_ref), num_returns=1, timeout=min(max(0.0, max_wait_s), self._silent_s))
        if ready:  # and every other instance that reported meanwhile
            ready, _ = ray.wait(list(by_ref), num_returns=len(by_ref), timeout=0)
        late = {i for i, (ref, since) in self.waiting.items() if ref not in ready and now - since > self._silent_s}
        results = {by_ref[ref]: ref for ref in ready}
        for inst_id in results:
            del self.waiting[inst_id]
        finished, broken = self._take(results)
        if broken or late:
            self.recover()
        return finished

    @property
    def _silent_s(self) -> float:
        """How long a results call may go unanswered before its instance counts as failed."""
        return RESULT_HOLD_S + self.ray_config.timeout_s

    def _settle_undelivered(self) -> None:
        if self.undelivered:
            self.undelivered = ray.wait(self.undelivered, num_returns=len(self.undelivered), timeout=0)[1]

    def _take(self, results: dict) -> tuple[list[Sequence], bool]:
        """Mirror the tokens and finished requests of each instance's results call (inst_id -> ref, in the
        order the calls were made); (finished, whether an instance failed)."""
        finished, broken = [], False
        for inst_id, future in results.items():
            try:
                tokens, done, snapshot = ray.get(future, timeout=self._silent_s)
            except (RayActorError, GetTimeoutError):
                broken = True
                continue
            if inst_id not in self.actors:  # died and dropped since the call was made
                continue
            self.snapshots[inst_id] = snapshot
            # (a loop that broke in a group already re-formed takes the new one at its next iteration boundary)
            broken |= snapshot.state == BROKEN and snapshot.group == self.group
            for req_id, (first, new) in tokens.items():
                seq = self.mirror.get(req_id)
                if seq is None:  # released (aborted) while its instance still served it
                    continue
                # a request moved whole reports from its new home, from its first token on (request_moves.py):
                # the old home's last report may come in after it, and changes nothing then
                if first + len(new) >= len(seq.output_ids):
                    self.home_of[req_id] = inst_id
                seq.output_ids[first:first + len(new)] = new
            for req_id, placement, num_preemptions in done:
                seq = self.mirror.get(req_id)
                if seq is None:
                    continue
                seq.status, seq.placement, seq.num_preemptions = Status.FINISHED, placement, num_preemptions
                self.done.add(req_id)
                finished.append(seq)
        return finished, broken

    @property
    def has_work(self) -> bool:
        return len(self.done) + len(self.failed) < len(self.mirror)

    def release(self, req_id: int) -> None:
        """Forget a finished, failed or aborted request (a long-running caller, once its result is delivered):
        what its instance still reports of it is dropped."""
        for kept in (self.mirror, self.home_of, self.failed):
            kept.pop(req_id, None)
        self.done.discard(req_id)

    def run(self, on_poll=None) -> list[Sequence]:
        """Collect until every dispatched request finished or failed; `on_poll(engine)` runs after each
        collection."""
        finished, stalled_since = [], None
        while self.has_work:
            finished += self.collect(RESULT_HOLD_S)
            if on_poll is not None:
                on_poll(self)
            idle = all(s.num_running == 0 and s.num_moves == 0 for s in self.snapshots.values())
            waiting = any(s.num_waiting for s in self.snapshots.values())
            stalled_since = (stalled_since or time.monotonic()) if idle and waiting else None
            if stalled_since and time.monotonic() - stalled_since > STALL_S:
                raise InputError("no request can be admitted with this memory budget; raise --blocks-per-instance")
        return finished

    # --- failures
    def _alive(self, inst_id: int) -> bool:
        try:
            ray.get(self.actors[inst_id].snapshot.remote(), timeout=self.ray_config.timeout_s)
            return True
        except (RayActorError, GetTimeoutError):
            return False

    def recover(self) -> None:
        """Form a new data-plane group of the live instances, re-dispatch the requests homed on dead ones."""
        deadline = time.monotonic() + DEATH_GRACE_S
        dead = [i for i in self.actors if not self._alive(i)]
        while not dead:  # a peer's broken connection can show before its actor's death does
            if time.monotonic() > deadline:
                errors = {i: s.error for i, s in self.snapshots.items() if s.state == BROKEN}
                raise RuntimeError(f"an instance loop failed with every instance alive: {errors}")
            time.sleep(0.05)
            dead = [i for i in self.actors if not self._alive(i)]
        survivors = sorted(set(self.actors) - set(dead))
        self.num_instance_failures += len(dead)
        orphans = [s for s in self.mirror.values() if self.home_of.get(s.req_id) in dead
                   and s.req_id not in self.done and s.req_id not in self.failed]
        ray.get(self.gm_actor.drop_instances.remote(dead))
        for d in dead:
            del self.actors[d]
            self.waiting.pop(d, None)
            self.sent.pop(d)
            self.snapshots.pop(d, None)
        if survivors:
            spec = self._group_spec(survivors)
            self.group = spec.address
            ray.get([self.actors[i].reform.remote(spec, dead, [s.req_id for s in orphans]) for i in survivors])
        self.config = replace(self.config, num_instances=max(1, len(survivors)))
        self.room_blocks = self.config.room_blocks(self.placement_blocks, self.homes, survivors)
        for seq in self.mirror.values():  # recomputed from scratch on fewer instances: some may not fit any more
            if seq.req_id in self.done or seq.req_id in self.failed or seq in orphans:
                continue
            try:
                self.config.check_fits(seq, self.room_blocks)
            except InputError as err:
                self.failed[seq.req_id] = f"instance {', '.join(map(str, dead))} died; {err}"
                self.undelivered.append(self.actors[self.home_of[seq.req_id]].abort.remote(seq.req_id))
        for seq in orphans:
            seq.status = Status.WAITING
            seq.num_preemptions += 1
            try:
                if not survivors:
                    raise InputError("no instance is left")
                self.add_request(seq)
            except InputError as err:
                self.failed[seq.req_id] = f"instance {', '.join(map(str, dead))} died; {err}"

    # --- observation and test hooks
    def stats(self) -> dict[int, LoopStats]:
        """Each instance's loop statistics as of its latest snapshot (they lag its loop by up to a control phase)."""
        return {i: s.stats for i, s in self.snapshots.items() if s.stats is not None}

    def usage(self) -> dict[int, dict]:
        """Per live instance: used rBlocks, reservations, pending moves, tables (all empty when idle)."""
        snaps = ray.get([a.snapshot.remote() for a in self.actors.values()])
        keys = ("num_used", "reserved", "num_moves", "num_tables")
        return {i: {k: getattr(s, k) for k in keys} for i, s in zip(self.actors, snaps)}

    @property
    def num_steps(self) -> int:
        return max((s.num_steps for s in self.stats().values()), default=0)

    def pause(self) -> None:
        """Hold every loop before its next control phase (no control phase runs anywhere until `resume`)."""
        self.delivered()
        ray.get([a.hold.remote("driver") for a in self.actors.values()])

    def sync_now(self) -> None:
        """While paused: every instance takes in its inbox (all requests added so far) and sends its heartbeat."""
        self.delivered()
        ray.get([a.sync_now.remote() for a in self.actors.values()])

    def resume(self) -> None:
        ray.get([a.unhold.remote("driver") for a in self.actors.values()])

    def restart_gmanager(self) -> None:
        """Kill the gManager actor; Ray restarts it and the instances send it their full state."""
        ray.get(self.gm_actor.get_boot_id.remote())  # created (a kill during creation is dropped)
        ray.kill(self.gm_actor, no_restart=False)

    def shutdown(self) -> None:
        for actor in self.actors.values():
            actor.stop.remote()
        for actor in [*self.actors.values(), self.gm_actor]:
            if actor is not None:
                ray.kill(actor, no_restart=True)
        remove_placement_group(self.pg)
