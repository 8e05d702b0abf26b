"""The cluster `repro bench scale` measures at every size (scale.py, scale_gmanager.py, scale_latency.py): LLaMA2-7B
instances of one A100 each (Fig 10a's setting) on the simulator's engine, seeded."""
from reference_impl.sim.config import sim_engine
from reference_impl.systems.registry import cluster
from repro.experiments.e2e import GPU

MODEL = "llama2-7b"
SEED = 0


def base_config(num_gpus: int):
    return cluster(MODEL, GPU, num_gpus, engine=sim_engine(seed=SEED))
