"""motivation: infinite-llm Fig 1 (static parallelism vs context length) and Fig 2 (decode utilisation).

Both from the calibrated A100 cost model, LLaMA2-7B.
Fig 1: 32 A100s as DP32TP1, DP4TP8 and DP1TP32. The calibration has TP up to 8 (Vidur's profiles), so
the 32-GPU instance is modelled as TP8 x PP4 (pipeline stages run one batch in turn). At context L an
instance runs min(MAX_BATCH, capacity // L) requests; cluster throughput = DP x batch / step time.
Fig 2: one A100; compute utilisation = decode FLOPs / (step time x dense bf16 peak), memory utilisation
= (weights + KV bytes read) / (step time x HBM bandwidth), over batch size at four context lengths.
"""
import pandas as pd

from reference_impl.calibration import CalibratedPerfModel
from reference_impl.calibration.specs import gpu_entry, model_spec
from reference_impl.calibration.perf_model import InstanceLoad, step_time_s
from repro.framework.base import ClaimRow, Experiment, default_run_id
from repro.framework.figures import main_result, new_figure, save, sns

GPU, MODEL = "A100-80GB-SXM", "llama2-7b"
MAX_BATCH = 256  # vLLM's default max_num_seqs
CONFIGS = {"DP32TP1": (32, 1, 1), "DP4TP8": (4, 8, 1), "DP1TP32": (1, 8, 4)}  # name -> (dp, tp, pp)
CONTEXTS = [1000, 2000, 5000, 10_000, 20_000, 50_000, 100_000, 200_000, 500_000, 1_000_000, 2_000_000]
UTIL_CONTEXTS = [20, 200, 2000, 20_000]
UTIL_BATCHES = [1, 2, 3, 5, 10, 20, 50, 100, 200, 400, 800, 1200, 1600, 2400, 3200, 4800]


def static_parallelism() -> list[dict]:
    rows = []
    for name, (dp, tp, pp) in CONFIGS.items():
        m = CalibratedPerfModel.for_setting(model=MODEL, gpu=GPU, tp=tp, pp=pp)
        capacity = m.memory.kv_capacity_tokens
        for ctx in CONTEXTS:
            batch = min(MAX_BATCH, capacity // ctx)
            thpt = dp * batch / step_time_s(m, InstanceLoad(batch, batch * ctx)) if batch else 0.0
            rows.append({"config": name, "context_len": ctx, "batch_size": batch, "throughput_tok_s": thpt,
                         "capacity_tokens": capacity})
    return rows


def non_attention_efficiency(tp: int = 8, batch_size: int = 1) -> float:
    """Per-GPU efficiency of the non-attention layers at TP `tp` relative to one GPU, same batch."""
    one = CalibratedPerfModel.for_setting(model=MODEL, gpu=GPU, tp=1)
    many = CalibratedPerfModel.for_setting(model=MODEL, gpu=GPU, tp=tp)
    t_one = step_time_s(one, InstanceLoad(batch_size, 0))
    t_many = step_time_s(many, InstanceLoad(batch_size, 0))
    return t_one / (tp * t_many)


def utilisation() -> list[dict]:
    m = CalibratedPerfModel.for_setting(model=MODEL, gpu=GPU, tp=1)
    spec, gpu = model_spec(MODEL), gpu_entry(GPU)
    peak_flops, hbm = gpu["bf16_dense_tflops"] * 1e12, gpu["hbm_gb_s"] * 1e9
    flops_per_token = 2 * (spec.num_layers * spec.layer_params() + spec.vocab_size * spec.hidden_size)
    kv_per_token = m.memory.kv_bytes_per_token_per_gpu
    rows = []
    for ctx in UTIL_CONTEXTS:
        max_batch = m.memory.kv_capacity_tokens // ctx
        for batch in [b for b in UTIL_BATCHES if b <= max_batch] + [max_batch]:
            step = step_time_s(m, InstanceLoad(batch, batch * ctx))
            flops = batch * flops_per_token + 4 * batch * ctx * spec.hidden_size * spec.num_layers
            moved = m.memory.weight_bytes_per_gpu + batch * ctx * kv_per_token
            rows.append({"context_len": ctx, "batch_size": batch, "max_batch": max_batch, "step_ms": step * 1e3,
                         "compute_util": flops / step / peak_flops, "memory_util": moved / step / hbm})
    return rows


def run(params, log) -> dict:
    return {"max_batch": MAX_BATCH, "static": static_parallelism(), "non_attention_efficiency_tp8":
            non_attention_efficiency(), "utilisation": utilisation()}


def claims(results: list[dict]) -> list[ClaimRow]:
    data = main_result(results)["data"]
    st = pd.DataFrame(data["static"])
    at_1k = st[st.context_len == 1000].set_index("config")["throughput_tok_s"]
    capacity = st.groupby("config")["capacity_tokens"].first()
    ut = pd.DataFrame(data["utilisation"])
    c20 = ut[ut.context_len == 20].set_index("batch_size")
    c20k = ut[ut.context_len == 20_000]
    near = c20.index[abs(c20.index - 800).argmin()]
    return [
        ClaimRow("obs1-static-tp", "KV capacity of DP1TP32 (tokens)", "2000K", 2e6, 2e6,
                 float(capacity["DP1TP32"]), "", "modelled as TP8xPP4; 90% of memory less weights"),
        ClaimRow("obs1-static-tp", "DP32TP1 / DP1TP32 throughput at 1K", "best vs worst", None, None,
                 round(float(at_1k["DP32TP1"] / at_1k["DP1TP32"]), 2), "x"),
        ClaimRow("obs1-static-tp", "TP8 non-attention per-GPU efficiency vs 1 GPU (batch 1)", "~1/3", 0.3, 0.37,
                 round(data["non_attention_efficiency_tp8"], 3), "", "paper's ~1/3 read as 0.30-0.37"),
        ClaimRow("obs2-utilization", "requests of context 20 one A100 fits", "1800", 1800, 1800,
                 float(c20["max_batch"].iloc[0]), "", "KV capacity of the calibrated memory model / 20"),
        ClaimRow("obs2-utilization", f"memory utilisation at batch {near}, context 20", "42%", 42, 42,
                 round(float(c20.loc[near, "memory_util"]) * 100, 1), "%"),
        ClaimRow("obs2-utilization", "max batch at context 20K", "3", 3, 3, float(c20k["max_batch"].iloc[0]), ""),
        ClaimRow("obs2-utilization", "compute util at 20K max batch / context-20 max batch", "~1%", None, None,
                 round(float(c20k["compute_util"].max() / c20["compute_util"].max()) * 100, 2), "%"),
    ]


def plot(results: list[dict], figures_dir: str) -> list[str]:
    data = main_result(results)["data"]
    st = pd.DataFrame(data["static"])
    fig, (ax,) = new_figure(1, width_in=5.5)
    sns.lineplot(st[st.batch_size > 0], x="context_len", y="throughput_tok_s", hue="config", marker="o", ax=ax)
    ax.set(xscale="log", yscale="log", xlabel="context length (tokens)", ylabel="cluster throughput (tok/s)",
           title="LLaMA2-7B on 32 A100 (calibrated model)")
    written = save(fig, figures_dir, "infinite-llm-fig1")
    ut = pd.DataFrame(data["utilisation"])
    ut["context"] = ut.context_len.map(lambda c: f"{c:,}")
    fig, axes = new_figure(2)
    for ax, col, label in zip(axes, ("compute_util", "memory_util"), ("compute", "memory bandwidth")):
        sns.lineplot(ut, x="batch_size", y=col, hue="context", marker="o", ax=ax)
        ax.set(xscale="log", xlabel="batch size", ylabel=f"{label} utilisation", title="one A100, LLaMA2-7B decode (calibrated model)")
    return written + save(fig, figures_dir, "infinite-llm-fig2")


EXPERIMENT = Experiment("motivation", ("infinite-llm Fig 1", "infinite-llm Fig 2"), "motivation.schema.json", run,
                        default_run_id, plot=plot, claims=claims, backends=("sim",), params=())
