"""Fig 13's cost-model arithmetic, the paper's own "estimated throughput per dollar". For each model and context:
- vLLM: one A100 instance of tp 1-8 GPUs holds weights and KV; largest batch that fits; step time from the
  calibrated A100 model (non-attention curve, all-reduce, KV read); the tp with the best tokens/s per dollar.
- vLLM on Lamina's compute GPUs alone (same tp, no memory devices): the batch and throughput comparison of the
  paper's Fig 12.
- Lamina: A100 compute devices (tp 1-8) and N memory devices, each stage priced by the design's step_cost.py
  at the largest batch the memory devices hold. Without overlap a step is compute + network + attention and
  every layer's round trip to the memory devices (two messages at the link between machines' latency); with
  rotational pipelining it is the slowest of the three (the pipeline's steady state with its micro-batches as
  cheap as the whole batch, the round trips behind the other micro-batch's stages and no fill or drain: the
  serving part prices those). The (tp, N) with the best tokens/s per dollar.
Batches are capped at MAX_BATCH for both.
"""
from dataclasses import asdict, dataclass

from reference_impl.calibration import CalibratedPerfModel
from reference_impl.calibration.links import DEFAULT_LINK
from reference_impl.calibration.perf_model import InstanceLoad, step_time_s
from reference_impl.errors import InputError
from reference_impl.systems.lamina.hardware import (MEMORY_DEVICE, PRICED_AS, device, gpu_price_usd,
                                                    kv_bytes_per_token, memory_attention_bytes_per_s, memory_pool_bytes,
                                                    nic_gb_s_per_gpu)
from reference_impl.systems.lamina.step_cost import MAX_BATCH, attention_s, compute_s, network_s, round_trip_s

GPU = "A100-80GB-SXM"
MODELS = ("llama2-13b", "llama2-70b")
FULL_CONTEXTS = (512, 1024, 2048, 4096, 8192, 16384, 32768)
QUICK_CONTEXTS = (1024, 16384)
TPS = (1, 2, 4, 8)
MAX_MEMORY_DEVICES = 64
SAME_GPUS = "vLLM (Lamina's compute GPUs)"


@dataclass(frozen=True, slots=True)
class Config:
    system: str
    model: str
    context: int
    tp: int
    memory_devices: int
    batch: int
    step_s: float
    compute_s: float
    attention_s: float
    network_s: float
    round_trips_s: float  # every layer's messages' latency (waited out without overlap)
    cost_usd: float

    @property
    def tok_s(self) -> float:
        return self.batch / self.step_s

    def to_dict(self) -> dict:
        return {**asdict(self), "tok_s": self.tok_s, "tok_s_per_kusd": 1e3 * self.tok_s / self.cost_usd}


def _model(model: str, tp: int) -> CalibratedPerfModel | None:
    try:
        # the link between machines: Lamina's memory devices sit behind the compute GPUs' NICs (vLLM uses none)
        return CalibratedPerfModel.for_setting(model=model, gpu=GPU, tp=tp, link=DEFAULT_LINK)
    except InputError:  # the weights do not fit this tp
        return None


def vllm_config(model: str, context: int, tp: int) -> Config | None:
    m = _model(model, tp)
    if m is None:
        return None
    batch = min(MAX_BATCH, m.memory.kv_capacity_tokens // context)
    if batch < 1:
        return None
    step = step_time_s(m, InstanceLoad(batch_size=batch, attn_kv_tokens=batch * context))
    return Config("vLLM", model, context, tp, 0, batch, step, step, 0.0, 0.0, 0.0, tp * gpu_price_usd(GPU))


def lamina_config(model: str, context: int, tp: int, memory_devices: int, overlap: bool) -> Config | None:
    m = _model(model, tp)
    if m is None:
        return None
    batch = min(MAX_BATCH, int(memory_pool_bytes(m.memory, memory_devices) // (context * kv_bytes_per_token(model))))
    if batch < 1:
        return None
    compute = compute_s(m, batch)
    attention = attention_s(model, batch * context, memory_attention_bytes_per_s(GPU, memory_devices))
    network = network_s(model, batch, tp, nic_gb_s_per_gpu())
    round_trips = m.num_layers * round_trip_s(m.link)
    step = max(compute, attention, network) if overlap else compute + attention + network + round_trips
    cost = tp * gpu_price_usd(GPU) + memory_devices * device(MEMORY_DEVICE)["price_usd"]
    return Config("Lamina" if overlap else "Lamina (no overlap)", model, context, tp, memory_devices, batch, step,
                  compute, attention, network, round_trips, cost)


def best(configs) -> Config | None:
    found = [c for c in configs if c is not None]
    return max(found, key=lambda c: (c.tok_s / c.cost_usd, -c.cost_usd)) if found else None


def best_vllm(model: str, context: int) -> Config | None:
    return best(vllm_config(model, context, tp) for tp in TPS)


def best_lamina(model: str, context: int, overlap: bool = True) -> Config | None:
    return best(lamina_config(model, context, tp, n, overlap)
                for tp in TPS for n in range(1, MAX_MEMORY_DEVICES + 1))


def devices_record() -> dict:
    """The priced devices as the result keeps them (the compute GPU's Table 1 row, the memory device, the NIC)."""
    return {"devices": {name: device(name) for name in (PRICED_AS[GPU], MEMORY_DEVICE)},
            "nic_gb_s_per_gpu": nic_gb_s_per_gpu()}

