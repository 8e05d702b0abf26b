"""Lamina's hardware (lamina Table 1 and section 6, devices.json): device specs and prices, the NIC of a compute
GPU, the KV a pool of memory devices holds, and the attention efficiency their attention runs at: the decode
attention KV read rate the calibration measured on the compute GPU over that GPU's datasheet HBM bandwidth (the
same kernel on a memory device is assumed to reach the same share of its bandwidth; no device of the calibration
is a memory device)."""
import json
from functools import cache
from pathlib import Path

from reference_impl.calibration import CalibratedPerfModel
from reference_impl.calibration.memory import MemoryModel
from reference_impl.calibration.specs import gpu_entry, model_spec
from reference_impl.errors import InputError

DEVICES_PATH = Path(__file__).with_name("devices.json")
MEMORY_DEVICE = "RTX 3090"  # lamina 6: the memory devices are priced as RTX 3090s
DTYPE_BYTES = 2  # BF16 weights and KV (lamina 6)
PRICED_AS = {"A100-80GB-SXM": "A100-80G", "H100-SXM": "H100"}  # the calibration's GPUs -> their Table 1 rows
EFFICIENCY_MODEL = "llama2-7b"  # any profiled model gives the GPU's KV read rate; one tp=1 fit is read


@cache
def devices() -> dict:
    return json.loads(DEVICES_PATH.read_text())


def device(name: str) -> dict:
    return devices()["devices"][name]


def nic_gb_s_per_gpu() -> float:
    return float(devices()["nic_gb_s_per_gpu"])


def gpu_price_usd(gpu: str) -> float:
    """Table 1's price of the calibration's GPU `gpu` (InputError where Table 1 has none)."""
    if gpu not in PRICED_AS:
        raise InputError(f"no price for GPU {gpu!r} in lamina Table 1: priced {', '.join(PRICED_AS)}")
    return device(PRICED_AS[gpu])["price_usd"]


@cache  # (read on every simulated step)
def kv_bytes_per_token(model: str) -> int:
    """K and V of one token, every layer and KV head (a memory device pool holds whole tokens)."""
    spec = model_spec(model)
    return 2 * spec.num_kv_heads * spec.head_dim * DTYPE_BYTES * spec.num_layers


def memory_pool_bytes(memory: MemoryModel, num_devices: int) -> float:
    """KV bytes `num_devices` memory devices hold, less the reserve share the calibration keeps on a GPU."""
    usable = device(MEMORY_DEVICE)["mem_gb"] * 1e9 * (1 - memory.reserve_bytes / memory.mem_bytes)
    return num_devices * usable


@cache
def attention_efficiency(gpu: str) -> float:
    """Decode attention's KV read rate over datasheet HBM bandwidth, as calibrated for `gpu`."""
    m = CalibratedPerfModel.for_setting(model=EFFICIENCY_MODEL, gpu=gpu, tp=1, link="intra-node")
    spec = model_spec(EFFICIENCY_MODEL)
    kv_per_layer = 2 * spec.num_kv_heads * spec.head_dim * DTYPE_BYTES
    return kv_per_layer / m.kv_read_s_per_token / (gpu_entry(gpu)["hbm_gb_s"] * 1e9)


def memory_attention_bytes_per_s(gpu: str, num_devices: int) -> float:
    """KV bytes per second `num_devices` memory devices read in decode attention (the KV split evenly)."""
    return num_devices * device(MEMORY_DEVICE)["mem_gb_s"] * 1e9 * attention_efficiency(gpu)
