"""A Lamina cluster of a base cluster: each instance keeps the base's compute GPUs (Infinite-LLM's instance_tp,
holding the weights) and gains memory devices holding its KV. The KV never leaves its instance's memory devices
(no pooling between instances: a request that outgrows them preempts, as in vLLM); the rBlocks an instance holds
are what its memory devices hold; its batch may grow to MAX_BATCH (lamina 5.5: FIFO up to a set threshold)."""
from dataclasses import dataclass, replace

from reference_impl.errors import InputError
from reference_impl.sim.config import SimConfig, perf_model
from reference_impl.systems.lamina.hardware import kv_bytes_per_token, memory_pool_bytes, nic_gb_s_per_gpu
from reference_impl.systems.lamina.step_cost import MAX_BATCH

# lamina 6.3 (Fig 16) pairs one compute device with three memory devices for LLaMA-13B
MEMORY_DEVICES_PER_GPU = 3
MICRO_BATCHES = 2  # lamina 5.1.1: n = 2 batches share one model replica, no context migration


@dataclass(frozen=True, slots=True)
class LaminaKnobs:
    memory_devices: int | None = None  # per instance; None: MEMORY_DEVICES_PER_GPU per compute GPU
    micro_batches: int = MICRO_BATCHES
    nic_gb_s_per_gpu: float | None = None  # None: devices.json's (lamina 6: one 200 Gbps NIC per GPU)
    max_batch: int = MAX_BATCH
    # the memory devices of a machine the calibration measured (sim-vs-real's Lamina arm: processes of this CPU):
    # their KV read rate together in bytes/s (None: devices.json's memory devices at the calibrated efficiency) and
    # the KV tokens an instance's pool holds (None: the memory devices' memory)
    attention_bytes_per_s: float | None = None
    pool_tokens: int | None = None

    def __post_init__(self):
        if self.memory_devices is not None and self.memory_devices < 1:
            raise InputError(f"a Lamina instance needs at least one memory device (got {self.memory_devices})")
        if self.micro_batches < 1 or self.max_batch < 1:
            raise InputError("micro-batches and the batch limit must be >= 1")
        if self.nic_gb_s_per_gpu is not None and not self.nic_gb_s_per_gpu > 0:
            raise InputError(f"NIC bandwidth must be > 0 GB/s (got {self.nic_gb_s_per_gpu})")
        if self.attention_bytes_per_s is not None and not self.attention_bytes_per_s > 0:
            raise InputError(f"memory devices' KV read rate must be > 0 bytes/s (got {self.attention_bytes_per_s})")
        if self.pool_tokens is not None and self.pool_tokens < 1:
            raise InputError(f"a Lamina instance's pool must hold at least one token (got {self.pool_tokens})")


def knobs_of(config: SimConfig) -> LaminaKnobs:
    knobs = config.design_knobs if isinstance(config.design_knobs, LaminaKnobs) else LaminaKnobs()
    return replace(knobs, memory_devices=knobs.memory_devices or MEMORY_DEVICES_PER_GPU * config.tp * config.pp,
                   nic_gb_s_per_gpu=knobs.nic_gb_s_per_gpu or nic_gb_s_per_gpu())


def kv_capacity_tokens(config: SimConfig, memory_devices: int) -> int:
    """KV tokens `memory_devices` memory devices hold for `config`'s model."""
    return int(memory_pool_bytes(perf_model(config).memory, memory_devices) // kv_bytes_per_token(config.model))


def configure(base: SimConfig) -> SimConfig:
    """`base`'s instances as Lamina instances (the knobs resolved into `design_knobs`)."""
    knobs = knobs_of(base)
    tokens = knobs.pool_tokens if knobs.pool_tokens is not None else kv_capacity_tokens(base, knobs.memory_devices)
    blocks = tokens // base.engine.block_size
    return replace(base, num_blocks=blocks, design_knobs=knobs,
                   engine=replace(base.engine, pooling=False, max_batch_size=knobs.max_batch))


def memory_devices(config: SimConfig) -> int:
    """Memory devices of a Lamina cluster (its Design.memory_devices)."""
    return knobs_of(config).memory_devices * config.engine.num_instances


def chosen(config: SimConfig, knobs: LaminaKnobs) -> dict:
    return {"memory_devices_per_instance": knobs.memory_devices}
