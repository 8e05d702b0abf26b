"""LoongServe run for real (the local engine, the Ray backend): its instances as one token pool with LoongServe's
placement handed to every instance (placement.py `peer_placement`: each prompt prefilled sequence-parallel on the
group LoongServe's analytic model chooses on the engine's cost model, the simulator's choice; a prompt larger than
its master spills onto idle instances, decode scales up onto more without moving old KV) and multi-master decode,
which is DistAttention's remote path (each holder attends over its share, the master merges the partials).
Dispatch is the engine's (the most free rBlocks less what its queue needs): LoongServe's rule (policy.py) differs
only in putting an instance in a prefill group last, and a real prefill group lasts one step of its master, within
which the local engine dispatches nothing and of which the Ray driver's view of the instances (their published
snapshots) knows nothing."""
from dataclasses import replace

from reference_impl.control.engine_config import EngineConfig
from reference_impl.control.engine_run import EngineRun
from reference_impl.errors import InputError
from reference_impl.systems.loongserve.knobs import LoongServeKnobs
from reference_impl.systems.loongserve.placement import peer_placement


def loongserve_engine(engine: EngineConfig) -> EngineConfig:
    """`engine`'s instances as one token pool: any instance may hold any request's KV (no debtor/creditor roles),
    and no gManager rounds."""
    return replace(engine, pooling=True, exclusive_roles=False, dgfm=False).without_gmanager_rounds()


def engine_run(config: EngineConfig, knobs=None) -> EngineRun:
    """Design.on_engine: `config`'s instances as LoongServe's pool, its placement on every instance."""
    if knobs is not None and not isinstance(knobs, LoongServeKnobs):
        raise InputError(f"LoongServe's knobs are a LoongServeKnobs, not a {type(knobs).__name__}")
    n = config.num_instances
    degree = min(n, (knobs or LoongServeKnobs()).max_degree or n)  # the simulator's fit: backend.py
    max_tokens = n * config.blocks_per_instance * config.block_size
    return EngineRun(loongserve_engine(config), peer_placement(degree, max_tokens))
