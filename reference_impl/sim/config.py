"""What a simulated cluster is: model, GPU, instances and their parallelism, and the control-plane knobs."""
from dataclasses import dataclass

from reference_impl.calibration.model import CalibratedPerfModel
from reference_impl.calibration.specs import gpu_entry, model_spec
from reference_impl.errors import InputError

INTER_NODE = "inter-node"


@dataclass(frozen=True, slots=True)
class SimConfig:
    model: str = "llama2-7b"
    gpu: str = "A100-80GB-SXM"
    num_instances: int = 4
    tp: int = 1
    pp: int = 1
    pooling: bool = True  # False: every request's KV stays on its instance (vLLM-M, vLLM-S)
    # Link between instances for remote MicroAttention and KV moves: "inter-node" is Vidur's measured A100 DGX
    # send/recv (~7.8 GB/s at 64 MB); "intra-node" NVLink; or a bandwidth in GB/s ("0.125": the paper's Ethernet).
    link: str = INTER_NODE
    block_size: int = 128  # tokens per rBlock (a coarse block keeps Algorithm 1's k search short)
    max_batch_size: int = 256
    move_chunk_tokens: int = 128  # KV moved per instance and step (overlapped with the step's compute)
    gmanager_interval_s: float = 1.0  # heartbeats + gManager round (recalls, Algorithm 1, DGFM)
    dgfm: bool = True
    exclusive_roles: bool = True  # False: distkv-llm's instances borrow and lend at once (GManagerConfig)
    # creditors a spilling rManager may try per gManager query; None = all instances. distkv-llm 4.4 suggests a
    # few, but with heartbeat-stale status a few drained ones can block a long all-or-none admission for good
    num_candidates: int | None = None
    max_k_evals: int | None = 16  # Algorithm 1's k search: coarse-to-fine (None: every k, the paper's loop)
    max_lent_blocks: int | None = None
    seed: int = 0

    def __post_init__(self):
        if self.num_instances < 1:
            raise InputError(f"need at least one instance (got {self.num_instances})")
        if self.block_size < 1 or self.max_batch_size < 1 or self.move_chunk_tokens < 1:
            raise InputError("block size, batch size and move chunk must be >= 1")
        if not self.gmanager_interval_s > 0:
            raise InputError(f"gManager interval must be > 0 s (got {self.gmanager_interval_s})")
        model_spec(self.model)
        gpus_per_node = gpu_entry(self.gpu)["gpus_per_node"]
        if self.tp > gpus_per_node:
            raise InputError(f"tp={self.tp} does not fit a node of {gpus_per_node} GPUs; use pp across nodes")

    @property
    def num_gpus(self) -> int:
        return self.num_instances * self.tp * self.pp


def perf_model(config: SimConfig) -> CalibratedPerfModel:
    """The calibrated cost model of one instance of `config` (raises InputError for a bad setting)."""
    return _cached_model(config.model, config.gpu, config.tp, config.pp, str(config.link))


_MODELS: dict = {}


def _cached_model(model, gpu, tp, pp, link) -> CalibratedPerfModel:
    key = (model, gpu, tp, pp, link)
    if key not in _MODELS:
        _MODELS[key] = CalibratedPerfModel.for_setting(model=model, gpu=gpu, tp=tp, pp=pp, link=link)
    return _MODELS[key]


def blocks_per_instance(config: SimConfig) -> int:
    return perf_model(config).memory.kv_capacity_tokens // config.block_size
