"""Ray backend: every instance (model replica, rManager, rBlock caches) and the gManager is a Ray actor.

The driver runs the engine's own step loop (`Engine` from engine.py) over handles to the actors; the control
plane code is the same as the local backend's. Per step, heartbeats and `move_kvcache` go driver -> actors,
`try_move_kvcache` and creditor hints go actor -> actor, DistAttention's query and `(out, lse)` go between
the home and its creditors per layer, and KV blocks that move travel through Ray's object store.

Failures: a gManager that Ray restarts is rebuilt from full heartbeats (the paper's failover rule); a dead
instance is dropped, the requests with KV on it are recomputed on the survivors (or fail with a reason when
the survivors cannot hold them), and the survivors free every block and reservation those requests held.
"""
import socket
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import ray
from ray.exceptions import GetTimeoutError, RayActorError
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

import reference_impl
from reference_impl.backends.local import check_prompts
from reference_impl.backends.ray_actors import InstanceActor
from reference_impl.backends.ray_gmanager import GManagerActor
from reference_impl.backends.ray_remote import GManagerHandle, InstanceHandle, PeerFailed
from reference_impl.engine import Engine, EngineConfig
from reference_impl.errors import InputError
from reference_impl.gmanager import GManagerConfig
from reference_impl.model import LlamaModel
from reference_impl.sequence import Sequence, Status

STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")


@dataclass(frozen=True, slots=True)
class RayConfig:
    address: str | None = None  # None or "local": start a private Ray here; else join the cluster there
    num_cpus: int = 2  # CPUs of a private Ray
    cpus_per_instance: float = 0.5  # placement-group bundle of one instance
    gpus_per_instance: float = 0.0  # > 0: one GPU group per instance, the model and KV on its GPU
    placement_strategy: str = "PACK"
    timeout_s: float = 120.0  # waiting for the placement group, a restarting gManager, a silent actor

    def __post_init__(self):
        if self.num_cpus < 1 or self.cpus_per_instance <= 0 or self.gpus_per_instance < 0:
            raise InputError("Ray needs >= 1 CPU, a positive CPU share per instance and >= 0 GPUs per instance")
        if self.placement_strategy not in STRATEGIES:
            raise InputError(f"placement strategy must be one of {', '.join(STRATEGIES)}")

    @property
    def is_private(self) -> bool:
        return self.address in (None, "local")


def check_reachable(address: str, timeout_s: float) -> None:
    """A quick TCP probe of HOST:PORT (or ray://HOST:PORT): Ray itself retries an unreachable head for minutes."""
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if address == "auto" or not sep or not port.isdigit():
        return
    try:
        socket.create_connection((host, int(port)), timeout=min(timeout_s, 10.0)).close()
    except OSError as err:
        raise InputError(f"cannot reach the Ray cluster at {address!r}: {err}; start it with "
                         f"`ray start --head --port {port}` or check --address") from None


def init_ray(rc: RayConfig) -> bool:
    """Start or join Ray; True when this call started it (the caller shuts it down). A remote cluster gets this
    package shipped as a py_module, so its nodes need only Python, torch and ray."""
    if ray.is_initialized():
        return False
    kwargs = {"include_dashboard": False, "logging_level": "WARNING", "log_to_driver": False}
    if rc.is_private:
        ray.init(num_cpus=rc.num_cpus, **kwargs)
        return True
    check_reachable(rc.address, rc.timeout_s)
    try:
        ray.init(address=rc.address, runtime_env={"py_modules": [str(Path(reference_impl.__file__).parent)]},
                 **kwargs)
    except (ConnectionError, ValueError, RuntimeError) as err:
        raise InputError(f"cannot join the Ray cluster at {rc.address!r}: {err}".splitlines()[0]) from None
    return True


class RayEngine(Engine):
    """`Engine` whose instances, rManagers and gManager are Ray actors; `shutdown()` ends them."""

    def __init__(self, config: EngineConfig, model: LlamaModel, ray_config: RayConfig = RayConfig(), *,
                 gmanager_config: GManagerConfig | None = None, perf_model=None):
        # Engine.__init__ sets the engine's state and counters; the one empty local instance and the gManager it
        # builds are replaced below by handles to the actors.
        super().__init__(replace(config, num_instances=1, blocks_per_instance=0, cpu_blocks_per_instance=0), self,
                         gmanager_config=gmanager_config, perf_model=perf_model)
        self.config = config
        self.ray_config = ray_config
        self.mirror: dict[int, Sequence] = {}  # req_id -> the caller's Sequence, tokens mirrored every step
        self.home_of: dict[int, int] = {}
        self.failed: dict[int, str] = {}  # req_id -> why it could not finish
        self.num_instance_failures = 0
        rc = ray_config
        gm_config = gmanager_config or GManagerConfig(block_size=config.block_size)
        self.gm_actor = GManagerActor.options(max_restarts=-1, num_cpus=0).remote(gm_config, perf_model)
        bundle = {"CPU": rc.cpus_per_instance, **({"GPU": rc.gpus_per_instance} if rc.gpus_per_instance else {})}
        self.pg = placement_group([dict(bundle) for _ in range(config.num_instances)], rc.placement_strategy)
        try:
            ray.get(self.pg.ready(), timeout=rc.timeout_s)
        except GetTimeoutError:
            self._end_actors()
            raise InputError(f"the Ray cluster cannot place {config.num_instances} instances of {bundle} "
                             f"({rc.placement_strategy}) within {rc.timeout_s:.0f} s; "
                             f"see `ray status`, or lower --instances") from None
        model_ref = ray.put(model)
        device = "cuda" if rc.gpus_per_instance else "cpu"
        self.actors = {i: InstanceActor.options(
            num_cpus=rc.cpus_per_instance, num_gpus=rc.gpus_per_instance,
            scheduling_strategy=PlacementGroupSchedulingStrategy(self.pg, placement_group_bundle_index=i),
        ).remote(i, model_ref, config, device) for i in range(config.num_instances)}
        ray.get([a.connect.remote(self.actors, self.gm_actor) for a in self.actors.values()])
        self.gmanager = GManagerHandle(self.gm_actor, lambda: self.heartbeats(full=True), rc.timeout_s)
        self.instances = [InstanceHandle(i, a, self.mirror) for i, a in self.actors.items()]
        self.rmanagers = {inst.inst_id: inst.rm for inst in self.instances}
        self.backend = self  # copy_blocks below, for DGFM swaps planned on the driver

    def copy_blocks(self, pairs) -> None:
        if pairs:
            ray.get(self.actors[pairs[0][1].inst_id].copy_blocks.remote(pairs))

    def add_request(self, seq: Sequence) -> int:
        """Dispatch as `Engine.add_request`; the actor gets a copy, `seq` receives its tokens as they come."""
        self.mirror[seq.req_id] = seq
        inst_id = super().add_request(seq)
        self.home_of[seq.req_id] = inst_id
        return inst_id

    def heartbeats(self, full: bool = False) -> None:
        """As `Engine.heartbeats`, the instances asked in parallel (each builds status and heartbeat at once)."""
        for hb in ray.get([inst.handle.heartbeat.remote(full) for inst in self.instances]):
            self.gmanager.heartbeat(hb)

    def restart_gmanager(self) -> None:
        """Kill the gManager actor; Ray restarts it and the next call rebuilds its map from full heartbeats."""
        ray.kill(self.gm_actor, no_restart=False)

    def step(self) -> list[Sequence]:
        try:
            return super().step()
        except (PeerFailed, RayActorError):
            self.recover()
            return []

    @property
    def has_work(self) -> bool:
        try:
            return super().has_work
        except RayActorError:
            self.recover()
            return super().has_work

    def dead_instances(self) -> list[int]:
        dead = []
        for inst in self.instances:
            try:
                ray.get(inst.handle.sched_call.remote("has_work"), timeout=self.ray_config.timeout_s)
            except (RayActorError, GetTimeoutError):
                dead.append(inst.inst_id)
        return dead

    def recover(self) -> None:
        """Drop dead instances, rebuild the gManager from the survivors, re-dispatch the orphaned requests."""
        dead = self.dead_instances()
        if not dead:
            return
        self.num_instance_failures += len(dead)
        self.instances = [i for i in self.instances if i.inst_id not in dead]
        for d in dead:
            del self.rmanagers[d], self.actors[d]
        orphans = [s for s in self.mirror.values()
                   if self.home_of.get(s.req_id) in dead and s.status != Status.FINISHED and s.req_id not in self.failed]
        for d in dead:
            ray.get([i.handle.drop_peer.remote(d, [s.req_id for s in orphans]) for i in self.instances])
        self.config = replace(self.config, num_instances=max(1, len(self.instances)))
        self.gmanager.reset()
        self.heartbeats(full=True)
        for seq in orphans:
            seq.status = Status.WAITING
            seq.num_preemptions += 1
            try:
                if not self.instances:
                    raise InputError("no instance is left")
                self.add_request(seq)
            except InputError as err:
                self.failed[seq.req_id] = f"instance {', '.join(map(str, dead))} died; {err}"

    def usage(self) -> dict[int, dict]:
        """Per live instance: used rBlocks, reservations, pending moves, tables (all empty when idle)."""
        return dict(zip([i.inst_id for i in self.instances],
                        ray.get([i.handle.usage.remote() for i in self.instances])))

    def num_moved_blocks(self) -> int:
        """rBlocks copied between places so far (moves, recalls, DGFM swaps), over the live instances."""
        return sum(ray.get([i.handle.num_copied_blocks.remote() for i in self.instances]))

    def step_times_s(self) -> list[float]:
        return [t for ts in ray.get([a.step_times_s.remote() for a in self.actors.values()]) for t in ts]

    def _end_actors(self) -> None:
        for actor in [*getattr(self, "actors", {}).values(), self.gm_actor]:
            ray.kill(actor, no_restart=True)
        remove_placement_group(self.pg)

    def shutdown(self) -> None:
        self._end_actors()


@dataclass(slots=True)
class RayGenerationResult:
    token_ids: list[list[int]]
    placement: list[dict[int, int]]  # per request: inst_id -> rBlocks when it finished
    failed: dict[int, str] = field(default_factory=dict)  # request index -> reason
    num_steps: int = 0
    num_preemptions: int = 0
    num_gmanager_restarts: int = 0
    num_instance_failures: int = 0
    wall_s: float = 0.0


def generate(model: LlamaModel, prompts: list[list[int]], max_new_tokens: int, config: EngineConfig,
             ray_config: RayConfig = RayConfig(), *, ignore_eos: bool = False, on_step=None) -> RayGenerationResult:
    """Greedy generation of every prompt with each instance a Ray actor; `on_step(engine)` runs after each step.
    Starts a private Ray (and shuts it down) unless Ray is already initialised or `ray_config.address` is set."""
    check_prompts(model, prompts)
    if max_new_tokens < 1:
        raise InputError("--max-new-tokens must be >= 1")
    started = init_ray(ray_config)
    try:
        engine = RayEngine(config, model, ray_config)
        try:
            eos = None if ignore_eos else model.config.eos_token_id
            seqs = [Sequence(i, list(p), max_new_tokens, eos) for i, p in enumerate(prompts)]
            for seq in seqs:
                engine.add_request(seq)
            t0 = time.perf_counter()
            engine.run(on_step=on_step)
            wall_s = time.perf_counter() - t0
            return RayGenerationResult([s.output_ids for s in seqs], [s.placement for s in seqs], dict(engine.failed),
                                       engine.num_steps, sum(s.num_preemptions for s in seqs),
                                       engine.gmanager.num_restarts, engine.num_instance_failures, wall_s)
        finally:
            engine.shutdown()
    finally:
        if started:
            ray.shutdown()
