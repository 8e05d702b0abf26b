"""What a cluster is, for every backend (the simulator, the local engine, Ray): the model, the GPU, each instance's
parallelism, the link between instances, the engine's knobs (the gManager's cadence among them), the serving design
and its knobs. The simulator's own fields sit beside these in its SimConfig (sim/config.py), which extends this one; a
design (systems/) reshapes a cluster config and is handed, looked up once by the caller, to the backend that runs it."""
from dataclasses import dataclass

from reference_impl.calibration.links import DEFAULT_LINK
from reference_impl.calibration.specs import model_spec
from reference_impl.control.engine_config import EngineConfig


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    model: str = "llama2-7b"
    gpu: str = "A100-80GB-SXM"
    tp: int = 1
    pp: int = 1
    # Link between instances for remote MicroAttention and KV moves: "inter-node" is Vidur's measured A100 DGX
    # send/recv (~7.8 GB/s at 64 MB); "intra-node" NVLink; or a bandwidth in GB/s ("0.125": the paper's Ethernet).
    link: str = DEFAULT_LINK
    engine: EngineConfig = EngineConfig()  # the instances, pooling and the control plane's knobs (gManager cadence)
    # The serving design whose policies run this cluster (reference_impl/systems/catalog.py), and its own knobs
    # (a frozen dataclass of that design's; None: its defaults). Knobs whose design's instances differ in shape
    # count the cluster's GPUs themselves (a `cluster_gpus(config)` method).
    design: str = "infinite-llm"
    design_knobs: object | None = None

    def __post_init__(self):
        model_spec(self.model)

    @property
    def gmanager_interval_s(self) -> float | None:
        """Seconds between the gManager's rounds (None: none), the engine config's."""
        return self.engine.gmanager.interval_s

    @property
    def num_gpus(self) -> int:
        gpus = getattr(self.design_knobs, "cluster_gpus", None)
        counted = gpus(self) if gpus is not None else None
        return counted if counted is not None else self.engine.num_instances * self.tp * self.pp
