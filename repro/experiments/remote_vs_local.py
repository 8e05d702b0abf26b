"""remote-vs-local: distkv-llm Fig 12, attention over offloaded rBlocks by sending the query there (remote
compute) vs fetching their KV back to the owner (local compute), one LLaMA2-13B-sized layer.

Measured: two real processes (gloo on CPU, NCCL on GPUs), rank 1 holding the offloaded KV. Modelled:
A100 over the calibration's measured NVLink and inter-node links (repro/attention/cost_model.py).
"""
import statistics
import time

import pandas as pd
import torch
import torch.distributed as dist

from reference_impl.kernels import micro_attention
from reference_impl.calibration.links import INTER_NODE, INTRA_NODE
from repro.attention.cost_model import AttentionCostModel
from repro.attention.dist import pack, paged, unpack
from repro.attention.ranks import run_ranks
from repro.framework.base import ClaimRow, Experiment, default_run_id
from repro.framework.figures import main_result, new_figure, save, sns

HEADS, HEAD_DIM, BLOCK = 40, 128, 16
MODEL_TOKENS = [1000, 2000, 5000, 10_000, 20_000, 50_000, 100_000]
MEASURED = {True: ([256, 1024], 1), False: ([1024, 4096, 16384], 3)}


def _rank(rank, world_size, device, tokens, seed, iters):
    dtype = torch.float16 if device.type == "cuda" else torch.float32
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(1, HEADS, HEAD_DIM, generator=gen).to(device, dtype)
    shape = (tokens, HEADS, HEAD_DIM)
    if rank == 1:
        k, v = (torch.randn(shape, generator=gen).to(device, dtype) for _ in range(2))
    else:
        k, v = torch.empty(shape, dtype=dtype, device=device), torch.empty(shape, dtype=dtype, device=device)
    msg = torch.empty(HEADS, HEAD_DIM + 1, dtype=torch.float32, device=device)

    def remote():
        if rank == 0:
            dist.send(q, 1)
            dist.recv(msg, 1)
            return unpack(msg)
        dist.recv(q, 0)
        dist.send(pack(*micro_attention(q, *paged(k, v, BLOCK), check_ranges=False)), 0)

    def local():
        if rank == 1:
            dist.send(k, 0)
            dist.send(v, 0)
            return None
        dist.recv(k, 1)
        dist.recv(v, 1)
        return micro_attention(q, *paged(k, v, BLOCK), check_ranges=False)

    out, times = {}, {"remote compute": [], "local compute": []}
    for i in range(iters + 1):
        for name, fn in (("remote compute", remote), ("local compute", local)):
            dist.barrier()
            t0 = time.perf_counter()
            out[name] = fn()
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            if i:
                times[name].append(time.perf_counter() - t0)
    if rank:
        return None
    diff = float((out["remote compute"][0].float() - out["local compute"][0].float()).abs().max())
    return {"times_s": {n: statistics.median(t) for n, t in times.items()}, "max_abs_diff": diff}


def run(params, log) -> dict:
    tokens_list, iters = MEASURED[params.quick]
    measured = []
    for tokens in tokens_list:
        log(f"remote-vs-local: {tokens} offloaded tokens on 2 processes")
        res = run_ranks(_rank, 2, tokens, params.seed, iters)
        measured += [{"tokens": tokens, "method": name, "time_us": t * 1e6, "max_abs_diff": res["max_abs_diff"]}
                     for name, t in res["times_s"].items()]
    modelled = []
    for link in (INTRA_NODE, INTER_NODE):
        m = AttentionCostModel.for_model("llama2-13b", link=link)
        for tokens in MODEL_TOKENS:
            attn = m.kv_read_s(tokens, HEADS)
            remote = m.link.time_s(m.query_bytes(HEADS)) + attn + m.link.time_s(m.result_bytes(HEADS))
            local = m.link.time_s(2 * tokens * HEADS * HEAD_DIM * m.dtype_bytes) + attn
            modelled += [{"tokens": tokens, "link": m.link.name, "method": "remote compute", "time_us": remote * 1e6},
                         {"tokens": tokens, "link": m.link.name, "method": "local compute", "time_us": local * 1e6}]
    return {"iters": iters, "measured": measured, "a100_model": modelled}


def _ratio(rows: list[dict]) -> pd.Series:
    df = pd.DataFrame(rows).pivot_table(index="tokens", columns="method", values="time_us")
    return df["local compute"] / df["remote compute"]


def claims(results: list[dict]) -> list[ClaimRow]:
    data = main_result(results)["data"]
    model = pd.DataFrame(data["a100_model"])
    rows = []
    for link, part in model.groupby("link", sort=False):
        ratio = _ratio(part.to_dict("records"))
        for tokens in (min(ratio.index), max(ratio.index)):
            rows.append(ClaimRow("remote-vs-local-compute", f"local / remote time, A100 {link}, {tokens // 1000}K tok",
                                 "far faster", None, None, round(float(ratio[tokens]), 2), "x"))
    measured = _ratio(data["measured"])
    top = max(measured.index)
    rows.append(ClaimRow("remote-vs-local-compute", f"local / remote time, measured here, {top} tok", "far faster",
                         None, None, round(float(measured[top]), 2), "x", "CPU, 2 gloo processes"))
    return rows


def plot(results: list[dict], figures_dir: str) -> list[str]:
    data = main_result(results)["data"]
    fig, (ax, ax_meas) = new_figure(2)
    model = pd.DataFrame(data["a100_model"])
    sns.lineplot(model, x="tokens", y="time_us", hue="method", style="link", marker="o", ax=ax)
    ax.set(xscale="log", yscale="log", xlabel="offloaded tokens", ylabel="attention over remote rBlocks (us)",
           title="A100, LLaMA2-13B layer (calibrated model)")
    sns.lineplot(pd.DataFrame(data["measured"]), x="tokens", y="time_us", hue="method", marker="o", ax=ax_meas)
    ax_meas.set(xscale="log", yscale="log", xlabel="offloaded tokens", ylabel="time (us)",
                title="measured here: 2 processes, CPU gloo")
    return save(fig, figures_dir, "distkv-llm-fig12")


EXPERIMENT = Experiment("remote-vs-local", ("distkv-llm Fig 12",), "remote_vs_local.schema.json", run,
                        default_run_id, plot=plot, claims=claims, backends=("local", "sim"), params=())
