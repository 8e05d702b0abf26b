"""What a simulated cluster is: a ClusterConfig (cluster_config.py) and the simulator's own fields beside it; the
calibrated cost model of one of its instances."""
from dataclasses import dataclass, replace
from pathlib import Path

from reference_impl.calibration.engine_costs import EngineCosts
from reference_impl.calibration.model import CalibratedPerfModel
from reference_impl.calibration.specs import gpu_entry
from reference_impl.cluster_config import ClusterConfig
from reference_impl.control.engine_config import EngineConfig, GManagerConfig
from reference_impl.errors import InputError


# The engine of a simulated cluster where the engine's own defaults do not fit the papers' A100 clusters: a coarse
# rBlock keeps Algorithm 1's k search short; a batch and a KV-move chunk of an A100's size; 4 instances; every
# instance may be a creditor candidate (distkv-llm 4.4 suggests a few, but with heartbeat-stale status a few
# drained ones can block a long all-or-none admission for good); Algorithm 1's k search coarse-to-fine. The
# gManager's `instances_per_node` follows the instance's GPUs (build_engine), its rounds run by time
# (`SimConfig.gmanager_interval_s`) and its rBlocks per instance are `blocks_per_instance` below.
SIM_ENGINE = EngineConfig(num_instances=4, block_size=128, max_batch_size=256, move_chunk_tokens=128,
                          gmanager=GManagerConfig(num_candidates=None, max_k_evals=16))


@dataclass(frozen=True, slots=True)
class SimConfig(ClusterConfig):
    """A cluster (ClusterConfig: model, GPU, parallelism, link, engine, design, gManager cadence) and what only the
    simulator reads of it."""
    engine: EngineConfig = SIM_ENGINE
    # The round's decisions take effect this long after its heartbeats (0: at once; `repro bench scale --latency`
    # sets the round's CPU time measured by repro/benchmarks/scale_gmanager.py)
    gmanager_latency_s: float = 0.0
    # A calibration file of the machine at hand (`repro profile`) instead of the committed A100/H100 fit, and a
    # fixed rBlock count per instance (None: what the GPU's memory holds): simulating a real local run
    coefficients_path: str | None = None
    num_blocks: int | None = None
    # What the engine implementation costs beyond the cost model (a served step, a peer call, co-running); None: the
    # calibration's (none in the A100/H100 fits, which have no engine; measured by sim-vs-real's pooled arm)
    engine_costs: EngineCosts | None = None

    def __post_init__(self):
        ClusterConfig.__post_init__(self)
        if not 0 <= self.gmanager_latency_s < (self.gmanager_interval_s or float("inf")):
            raise InputError(f"gManager round latency must be >= 0 s and under the interval "
                             f"({self.gmanager_interval_s} s); got {self.gmanager_latency_s}")
        gpus_per_node = gpu_entry(self.gpu)["gpus_per_node"] if self.coefficients_path is None else 1
        if self.tp > gpus_per_node:
            raise InputError(f"tp={self.tp} does not fit a node of {gpus_per_node} GPUs; use pp across nodes")


def sim_engine(**knobs) -> EngineConfig:
    """SIM_ENGINE with these EngineConfig fields changed."""
    return replace(SIM_ENGINE, **knobs)


def with_engine(config: SimConfig, **knobs) -> SimConfig:
    """`config` with these fields of its EngineConfig changed."""
    return replace(config, engine=replace(config.engine, **knobs))


def perf_model(config: SimConfig) -> CalibratedPerfModel:
    """The calibrated cost model of one instance of `config` (raises InputError for a bad setting)."""
    path = config.coefficients_path
    version = Path(path).stat().st_mtime_ns if path is not None and Path(path).is_file() else None
    return _cached_model(config.model, config.gpu, config.tp, config.pp, str(config.link), path, version)


def engine_costs(config: SimConfig) -> EngineCosts:
    """What `config`'s engine costs beyond the cost model: `config.engine_costs`, else its calibration's."""
    if config.engine_costs is not None:
        return config.engine_costs
    return EngineCosts.from_calibration(config.coefficients_path, config.gpu, config.model)


_MODELS: dict = {}


def _cached_model(model, gpu, tp, pp, link, coefficients_path=None, version=None) -> CalibratedPerfModel:
    key = (model, gpu, tp, pp, link, coefficients_path, version)
    if key not in _MODELS:
        _MODELS[key] = CalibratedPerfModel.for_setting(model=model, gpu=gpu, tp=tp, pp=pp, link=link,
                                                       coefficients_path=coefficients_path)
    return _MODELS[key]


def blocks_per_instance(config: SimConfig, model: CalibratedPerfModel | None = None) -> int:
    """rBlocks of one instance: `config.num_blocks`, else what the GPU's memory holds (`model`: the cost model of
    `config`, when the caller has it)."""
    if config.num_blocks is not None:
        return config.num_blocks
    return (perf_model(config) if model is None else model).memory.kv_capacity_tokens // config.engine.block_size
