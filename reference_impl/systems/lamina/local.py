"""Lamina's attention offloading run for real on the local engine (real model, real KV): compute instances hold the
weights and hold no KV (a pool of none), memory instances stand in for Lamina's memory devices: they hold every
request's KV and compute its attention, the compute instance merging their partials; which is DistAttention's
remote path (a debtor whose KV is all on creditors: MicroAttention there, ScaleReduce at home). Requests go to the
compute instances only (the least loaded); memory instances serve no request of their own. No gManager rounds and no
retrieval: KV never comes home. Greedy tokens equal one instance's. Not modelled here: Lamina's rotational
pipelining of micro-batches (the local engine steps its instances one after another)."""
from reference_impl.control.engine import Engine, EngineConfig
from reference_impl.control.placement import Placement
from reference_impl.control.sequence import Sequence
from reference_impl.errors import InputError


def lamina_engine_config(config: EngineConfig) -> EngineConfig:
    """`config`'s instances with pooling on (KV on the memory instances), no gManager rounds, no DGFM."""
    from dataclasses import replace

    return replace(config, pooling=True, gmanager_interval_steps=0, dgfm=False)


def offload_placement(num_compute: int, num_instances: int, engine_of) -> Placement:
    """Compute instances (ids below `num_compute`) hold no rBlocks; every rBlock of theirs goes to the memory
    instance with the most free room (ties: the lowest id), and none comes home. `engine_of()`: the engine, once
    built (the rules are given to its constructor)."""
    memory = list(range(num_compute, num_instances))

    def recommend(debtor: int, num_blocks: int) -> list[int]:
        rms = engine_of().rmanagers
        return sorted(memory, key=lambda i: (-rms[i].num_free, i))

    return Placement(recommend=recommend, retrieval=lambda room: 0,
                     blocks=lambda inst_id: 0 if inst_id < num_compute else None)


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
                    placement=offload_placement(num_compute, config.num_instances, lambda: engine))
    eos = None if ignore_eos else model.config.eos_token_id
    seqs = [Sequence(i, list(p), max_new_tokens, eos) for i, p in enumerate(prompts)]
    compute = engine.instances[:num_compute]
    for seq in seqs:
        config.check_fits(seq)
        min(compute, key=lambda i: (i.scheduler.num_waiting_blocks + len(i.scheduler.running), i.inst_id)) \
            .scheduler.add(seq)
    engine.run()
    result = GenerationResult([s.output_ids for s in seqs], [s.placement for s in seqs], [s.logits for s in seqs],
                              engine.num_steps, sum(s.num_preemptions for s in seqs))
    return result, engine
