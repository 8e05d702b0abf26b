"""What a design's cluster costs, for comparisons per dollar and per accelerator: its GPUs and the devices its design
adds (Design.memory_devices: Lamina's memory devices), at lamina Table 1's prices (lamina/hardware.py's table)."""
from reference_impl.sim.config import SimConfig
from reference_impl.systems.catalog import design
from reference_impl.systems.lamina.hardware import MEMORY_DEVICE, device, gpu_price_usd


def memory_devices(config: SimConfig) -> int:
    """The devices beyond GPUs of the cluster `config`'s design made (none for most designs)."""
    count = design(config.design).memory_devices
    return 0 if count is None else count(config)


def price_usd(config: SimConfig) -> float:
    """The cluster's hardware at lamina Table 1's prices: its GPUs, and its design's memory devices."""
    return config.num_gpus * gpu_price_usd(config.gpu) + memory_devices(config) * device(MEMORY_DEVICE)["price_usd"]


def accelerators(config: SimConfig) -> int:
    """Devices of the cluster, a memory device counted as one (lamina's own testbed used A100s as them)."""
    return config.num_gpus + memory_devices(config)
