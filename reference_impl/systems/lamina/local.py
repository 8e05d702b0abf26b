"""Lamina's attention offloading run for real on the engine (real model, real KV; the local backend here, the Ray
backend with the same Placement): compute instances hold the weights and no KV (a pool of none), memory instances
stand in for Lamina's memory devices: they hold every request's KV and compute its attention, the compute instance
merging their partials; which is DistAttention's remote path (a debtor whose KV is all on creditors: MicroAttention
there, ScaleReduce at home). Requests go to the compute instances only (the least loaded); the gManager recommends
where their rBlocks go; memory instances serve no request of their own. No gManager rounds and no retrieval: KV
never comes home. Greedy tokens equal one instance's. Not run: Lamina's rotational pipelining of micro-batches."""
from dataclasses import dataclass, replace

from reference_impl.control.engine import Engine, EngineConfig
from reference_impl.control.engine_run import EngineRun
from reference_impl.control.placement import Placement
from reference_impl.control.sequence import Sequence
from reference_impl.errors import InputError


def lamina_engine_config(config: EngineConfig) -> EngineConfig:
    """`config`'s instances with pooling on (KV on the memory instances), no gManager rounds, no DGFM."""
    return replace(config, pooling=True, dgfm=False).without_gmanager_rounds()


@dataclass(frozen=True, slots=True)
class ComputeHoldsNone:
    """Placement.blocks: instances below `num_compute` hold no rBlocks (a value: equal placements are one engine)."""
    num_compute: int

    def __call__(self, inst_id: int) -> int | None:
        return 0 if inst_id < self.num_compute else None


def _never_home(room: int) -> int:
    return 0


def offload_placement(num_compute: int) -> Placement:
    """Compute instances (ids below `num_compute`) hold no rBlocks: every rBlock of theirs goes where the gManager
    recommends, a memory instance (the compute instances have no room to lend), and none comes home. Picklable: the
    Ray backend hands it to its instance actors."""
    return Placement(retrieval=_never_home, blocks=ComputeHoldsNone(num_compute))


def default_num_compute(num_instances: int, knobs=None) -> int:
    """A real run's compute instances: one per `memory_devices` + 1 instances (the knob's, else one memory instance
    per compute instance), at least one, fewer than all."""
    memory = getattr(knobs, "memory_devices", None) or 1
    return min(max(1, num_instances // (1 + memory)), num_instances - 1)


def engine_run(config: EngineConfig, knobs=None) -> EngineRun:
    """Design.on_engine: `config`'s instances as compute and memory instances (`default_num_compute`)."""
    if config.num_instances < 2:
        raise InputError("Lamina needs at least 2 instances (a compute and a memory one)")
    num_compute = default_num_compute(config.num_instances, knobs)
    return EngineRun(lamina_engine_config(config), offload_placement(num_compute), tuple(range(num_compute)))


def dispatch_to_compute(instances, seq: Sequence) -> int:
    """The compute instance (of `instances`) with the fewest requests queued and running (ties: the lowest id)."""
    inst = min(instances, key=lambda i: (len(i.scheduler.waiting) + len(i.scheduler.running), i.inst_id))
    inst.scheduler.add(seq)
    return inst.inst_id


def generate_lamina(model, prompts: list[list[int]], max_new_tokens: int, config: EngineConfig, num_compute: int, *,
                    ignore_eos: bool = False, device="cpu"):
    """backends/local.generate with the first `num_compute` of `config`'s instances computing and the rest holding
    the KV: its GenerationResult and the engine (to read where the KV went). (The torch backend is imported here:
    the systems' modules stay torch-free.)"""
    from reference_impl.backends.local import GenerationResult, LocalBackend, check_prompts, to_device

    if not 1 <= num_compute < config.num_instances:
        raise InputError(f"Lamina needs 1 to {config.num_instances - 1} compute instances of {config.num_instances} "
                         f"(got {num_compute})")
    check_prompts(model, prompts)
    config = lamina_engine_config(config)
    engine = Engine(config, LocalBackend(to_device(model, device), config, device=device),
                    placement=offload_placement(num_compute))
    eos = None if ignore_eos else model.config.eos_token_id
    seqs = [Sequence(i, list(p), max_new_tokens, eos) for i, p in enumerate(prompts)]
    compute = engine.instances[:num_compute]
    room = config.room_blocks(offload_placement(num_compute).blocks, range(num_compute))
    for seq in seqs:
        config.check_fits(seq, room)
        dispatch_to_compute(compute, seq)
    engine.run()
    result = GenerationResult([s.output_ids for s in seqs], [s.placement for s in seqs], [s.logits for s in seqs],
                              engine.num_steps, sum(s.num_preemptions for s in seqs))
    return result, engine
