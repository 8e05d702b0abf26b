"""lamina (lamina Fig 13): estimated decode throughput per hardware dollar, attention offloading vs vLLM.

Cost-model arithmetic, as the paper's own "estimated throughput per dollar". For each model and context:
- vLLM: one A100 instance of tp 1-8 GPUs holds weights and KV; largest batch that fits; step time from the
  calibrated A100 model (non-attention curve, all-reduce, KV read); the tp with the best tokens/s per dollar.
- vLLM on Lamina's compute GPUs alone (same tp, no memory devices): the batch and throughput comparison of the
  paper's Fig 12.
- Lamina: A100 compute devices (tp 1-8) run everything but attention; N memory devices (RTX 3090) hold the
  KV and run attention at their bandwidth times the efficiency the calibration measured for A100 decode
  attention (KV read rate / datasheet HBM); each layer sends q, k, v and receives the output over one 200 Gbps
  NIC per compute GPU. Without overlap a step is compute + network + attention; with rotational pipelining
  (two batches alternating) it is the slowest of the three. The (tp, N) with the best tokens/s per dollar.
Batches are capped at MAX_BATCH for both. Prices and device specs: lamina Table 1 (repro/data).
LLaMA2-70B stands in for the paper's LLaMA-33B: the calibration has no 33B profile, and 70B's GQA keeps 8x
less KV per token, which favours vLLM.
"""
import json
from dataclasses import asdict, dataclass, replace
from functools import cache
from importlib import resources

from reference_impl.calibration import CalibratedPerfModel
from reference_impl.calibration.specs import gpu_entry, model_spec
from reference_impl.errors import InputError
from reference_impl.calibration.perf_model import InstanceLoad, step_time_s
from repro.framework.base import ClaimRow, Experiment, default_run_id
from repro.framework.figures import main_result, new_figure, save

GPU = "A100-80GB-SXM"
MODELS = ("llama2-13b", "llama2-70b")
FULL_CONTEXTS = (512, 1024, 2048, 4096, 8192, 16384, 32768)
QUICK_CONTEXTS = (1024, 16384)
TPS = (1, 2, 4, 8)
MAX_MEMORY_DEVICES = 64
MAX_BATCH = 4096
DTYPE_BYTES = 2
SAME_GPUS = "vLLM (Lamina's compute GPUs)"


@cache
def devices() -> dict:
    return json.loads(resources.files("repro.data").joinpath("lamina_devices.json").read_text())


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
    cost_usd: float

    @property
    def tok_s(self) -> float:
        return self.batch / self.step_s

    def to_dict(self) -> dict:
        return {**asdict(self), "tok_s": self.tok_s, "tok_s_per_kusd": 1e3 * self.tok_s / self.cost_usd}


def _model(model: str, tp: int) -> CalibratedPerfModel | None:
    try:
        return CalibratedPerfModel.for_setting(model=model, gpu=GPU, tp=tp, link="intra-node")
    except InputError:  # the weights do not fit this tp
        return None


def kv_bytes_per_token(model: str) -> int:
    spec = model_spec(model)
    return 2 * spec.num_kv_heads * spec.head_dim * DTYPE_BYTES * spec.num_layers


def vllm_config(model: str, context: int, tp: int) -> Config | None:
    m = _model(model, tp)
    if m is None:
        return None
    batch = min(MAX_BATCH, m.memory.kv_capacity_tokens // context)
    if batch < 1:
        return None
    step = step_time_s(m, InstanceLoad(batch_size=batch, attn_kv_tokens=batch * context))
    price = devices()["devices"]["A100-80G"]["price_usd"]
    return Config("vLLM", model, context, tp, 0, batch, step, step, 0.0, 0.0, tp * price)


def attention_efficiency() -> float:
    """Decode attention's KV read rate over datasheet HBM bandwidth, as calibrated for the A100."""
    m = _model("llama2-7b", 1)
    spec = model_spec("llama2-7b")
    kv_per_layer = 2 * spec.num_kv_heads * spec.head_dim * DTYPE_BYTES
    return kv_per_layer / m.kv_read_s_per_token / (gpu_entry(GPU)["hbm_gb_s"] * 1e9)


def lamina_config(model: str, context: int, tp: int, memory_devices: int, overlap: bool) -> Config | None:
    m = _model(model, tp)
    if m is None:
        return None
    spec, dev = model_spec(model), devices()
    mem = dev["devices"]["RTX 3090"]
    usable = mem["mem_gb"] * 1e9 * (1 - m.memory.reserve_bytes / m.memory.mem_bytes)
    batch = min(MAX_BATCH, int(memory_devices * usable // (context * kv_bytes_per_token(model))))
    if batch < 1:
        return None
    compute = step_time_s(m, InstanceLoad(batch_size=batch, attn_kv_tokens=0))
    attention = batch * context * kv_bytes_per_token(model) / (
        memory_devices * mem["mem_gb_s"] * 1e9 * attention_efficiency())
    kv_dim = spec.num_kv_heads * spec.head_dim
    per_token_layer = (spec.hidden + 2 * kv_dim + spec.hidden) * DTYPE_BYTES  # q, k, v out; attention back
    network = spec.num_layers * batch * per_token_layer / (tp * dev["nic_gb_s_per_gpu"] * 1e9)
    step = max(compute, attention, network) if overlap else compute + attention + network
    cost = tp * dev["devices"]["A100-80G"]["price_usd"] + memory_devices * mem["price_usd"]
    return Config("Lamina" if overlap else "Lamina (no overlap)", model, context, tp, memory_devices, batch, step,
                  compute, attention, network, cost)


def best(configs) -> Config | None:
    found = [c for c in configs if c is not None]
    return max(found, key=lambda c: (c.tok_s / c.cost_usd, -c.cost_usd)) if found else None


def run(params, log) -> dict:
    contexts = QUICK_CONTEXTS if params.quick else FULL_CONTEXTS
    rows = []
    for model in MODELS:
        for context in contexts:
            picks = [best(vllm_config(model, context, tp) for tp in TPS)]
            for overlap in (True, False):
                picks.append(best(lamina_config(model, context, tp, n, overlap)
                                  for tp in TPS for n in range(1, MAX_MEMORY_DEVICES + 1)))
            if picks[1] is not None:  # vLLM on Lamina's compute GPUs alone: the paper's Fig 12 batch comparison
                same = vllm_config(model, context, picks[1].tp)
                picks.append(same and replace(same, system=SAME_GPUS))
            for c in picks:
                if c is not None:
                    rows.append(c.to_dict())
                    log(f"{model} ctx {context:6d} {c.system:<20} tp {c.tp} + {c.memory_devices:2d} mem  batch "
                        f"{c.batch:5d}  {c.tok_s:8.0f} tok/s  {1e3 * c.tok_s / c.cost_usd:7.1f} tok/s per k$")
    return {"gpu": GPU, "attention_efficiency": attention_efficiency(), "max_batch": MAX_BATCH,
            "devices": devices(), "rows": rows}


def ratios(data: dict, system: str = "Lamina") -> list[dict]:
    """Per (model, context): tokens/s per dollar against the best vLLM; batch and throughput at max batch
    against vLLM on the same compute GPUs (None where the model does not fit them alone)."""
    out = []
    for model in MODELS:
        for context in sorted({r["context"] for r in data["rows"]}):
            pick = {r["system"]: r for r in data["rows"] if r["model"] == model and r["context"] == context}
            if system in pick and "vLLM" in pick:
                a, b, same = pick[system], pick["vLLM"], pick.get(SAME_GPUS)
                out.append({"model": model, "context": context, "per_dollar": a["tok_s_per_kusd"] / b["tok_s_per_kusd"],
                            "batch": same and a["batch"] / same["batch"], "tput": same and a["tok_s"] / same["tok_s"]})
    return out


def claims(results) -> list[ClaimRow]:
    data = main_result(results)["data"]
    r = ratios(data)
    note = ("cost model; A100 compute + RTX 3090 memory devices priced as lamina Table 1; LLaMA2-13B and "
            f"LLaMA2-70B (GQA) at {min(x['context'] for x in r)}-{max(x['context'] for x in r)} tokens; "
            f"batch cap {data['max_batch']}")
    same = "against vLLM on Lamina's compute GPUs alone, where the model fits them"
    notes = {"per_dollar": note, "batch": same, "tput": same}
    rows = []
    for key, metric, paper, low, high in (("per_dollar", "tput per $ vs vLLM", "1.48x-12.1x", 1.48, 12.1),
                                          ("batch", "max batch vs vLLM", "10.7x-64x", 10.7, 64.0),
                                          ("tput", "tput at max batch vs vLLM", "1.75x-20.5x", 1.75, 20.5)):
        values = [x[key] for x in r if x[key] is not None]
        for bound, pick in (("min", min), ("max", max)):
            rows.append(ClaimRow("lamina-thpt-per-dollar", f"{metric} ({bound} over models, contexts)", paper,
                                 low, high, pick(values) if values else None, "x", notes[key]))
    return rows


def plot(results, figures_dir) -> list[str]:
    import pandas as pd

    from repro.framework.figures import sns

    data = main_result(results)["data"]
    frame = pd.DataFrame(data["rows"])
    frame["ctx"] = frame["context"].map(lambda c: f"{c / 1024:g}K")
    fig, axes = new_figure(len(MODELS), width_in=4.2, height_in=3.0)
    for ax, model in zip(axes, MODELS):
        sns.barplot(frame[frame["model"] == model], x="ctx", y="tok_s_per_kusd", hue="system", ax=ax,
                    legend=ax is axes[0])
        ax.set(title=f"{model}, A100 + RTX 3090 memory devices", xlabel="context length",
               ylabel="tokens/s per $1000 of hardware")
    return save(fig, figures_dir, "lamina-fig13")


EXPERIMENT = Experiment("lamina", ("lamina Fig 13",), "lamina.schema.json", run, default_run_id, plot=plot,
                        claims=claims, params=())
