"""LoongServe (SOSP'24, arXiv 2404.09526): elastic sequence parallelism on Infinite-LLM's instances (the same GPUs).
One token pool over the instances; each prefill runs sequence-parallel on a group chosen by LoongServe's analytic
model (backend.py, analytic.py, sp_cost.py); KV stays where the prefill put it and decode is multi-master remote
attention; placement and scale-up through the Scheduler's creditor hint (placement.py), dispatch (policy.py). Run
for real on the local and the Ray backend (on_engine.py): the placement read through each instance's peers, each
prompt split into one segment per member of its group (the master and the idle instances the same analytic model
chooses on the engine's cost model), the segments prefilled by their members (backends/sp_prefill.py), decode
multi-master (DistAttention's remote path)."""
from dataclasses import replace

from reference_impl.sim.config import SimConfig
from reference_impl.systems.design import Design
from reference_impl.systems.loongserve.backend import LoongServeBackend
from reference_impl.systems.loongserve.knobs import LoongServeKnobs
from reference_impl.systems.loongserve.on_engine import engine_run, loongserve_engine
from reference_impl.systems.loongserve.policy import LoongServePolicy

__all__ = ["DESIGN", "LoongServeKnobs", "loongserve_engine"]


def chosen(config: SimConfig, knobs: LoongServeKnobs) -> dict:
    return {"ring_degree": knobs.max_degree or config.engine.num_instances, "ring_link": knobs.ring_link or config.link}


def loongserve(config: SimConfig) -> SimConfig:
    return replace(config, engine=loongserve_engine(config.engine))


DESIGN = Design("loongserve", "elastic sequence-parallel prefill on instance groups, multi-master decode over one "
                "token pool", configure=loongserve, policy=LoongServePolicy, backend=LoongServeBackend,
                on_engine=engine_run,
                knobs=LoongServeKnobs, chosen=chosen)
