"""The command line of DistAttention: `repro attention check` (exactness) and `repro bench attention` (speed)."""
import json

import click

from repro.options import parse_int_list, seed_option

LAYOUTS = {"MHA": (8, 8), "GQA": (8, 2), "MQA": (8, 1)}
DTYPES = ("float32", "float16", "bfloat16")
MAX_LENGTH = 2**20  # tokens per sequence: 1M tokens of fp32 KV with 8 heads of 128 is 8 GiB, beyond a CPU check


@click.group()
def attention():
    """DistAttention kernels: equivalence checks."""


@attention.command()
@click.option("--backend", "backends", type=click.Choice(["torch", "triton"]), multiple=True,
              help="Backends to check (default: both; Triton runs in its interpreter on CPU).")
@click.option("--lengths", default="1,17,97,1000,4133", show_default=True,
              help="Comma-separated sequence lengths of the batch.")
@click.option("--head-dim", default=128, show_default=True, type=click.IntRange(min=16))
@click.option("--block-size", default=16, show_default=True, type=click.IntRange(min=1))
@seed_option
@click.option("--json", "as_json", is_flag=True, help="Print the table as JSON.")
def check(backends, lengths, head_dim, block_size, seed, as_json):
    """Split every sequence's rBlocks at random into 1-5 parts, run MicroAttention per part, merge with
    ScaleReduce, and compare with exact fp32 attention: max error per backend, dtype and head layout."""
    import numpy as np
    import torch

    from reference_impl.kernels.equivalence import equivalence, make_case, split_and_merge
    from repro.progress import progress

    seq_lens = parse_int_list(lengths, "--lengths", minimum=0, maximum=MAX_LENGTH)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    rows = []
    cases = [(b, d, layout) for b in backends or ("torch", "triton") for d in DTYPES for layout in LAYOUTS]
    for backend, dtype_name, layout in progress(cases, desc="attention check", unit="case"):
        heads = LAYOUTS[layout]
        case = make_case(seq_lens, *heads, head_dim, block_size, getattr(torch, dtype_name), seed, device)
        result = equivalence(case, *split_and_merge(case, np.random.default_rng(seed), backend))
        rows.append({"backend": backend, "dtype": dtype_name, "layout": layout,
                     "heads_q_kv": f"{heads[0]}/{heads[1]}", "max_out_err": result.out_err,
                     "bound": result.out_bound, "max_lse_err": result.lse_err, "ok": result.ok})
    if as_json:
        click.echo(json.dumps({"device": device, "seq_lens": seq_lens, "rows": rows}, indent=2))
    else:
        click.echo(f"DistAttention vs exact fp32 attention on {device}; seq lens {seq_lens}, "
                   f"head_dim {head_dim}, block size {block_size}")
        header = f"{'backend':<8}{'dtype':<10}{'layout':<8}{'Hq/Hkv':<8}{'max |out err|':>15}{'bound':>11}" \
                 f"{'max |lse err|':>15}  result"
        click.echo(header)
        click.echo("-" * len(header))
        for r in rows:
            click.echo(f"{r['backend']:<8}{r['dtype']:<10}{r['layout']:<8}{r['heads_q_kv']:<8}"
                       f"{r['max_out_err']:>15.3e}{r['bound']:>11.2e}{r['max_lse_err']:>15.3e}  "
                       f"{'ok' if r['ok'] else 'FAIL'}")
    if not all(r["ok"] for r in rows):
        raise click.ClickException("some cases exceed their error bound")

CONTEXTS = "1024,8192,32768,131072"
BATCHES = "1,16,64"


@click.command("attention")
@click.option("--models", default="llama2-7b,llama2-70b", show_default=True,
              help="Head layouts: llama2-7b (32/32/128), llama2-70b (64/8/128).")
@click.option("--contexts", default=CONTEXTS, show_default=True, help="Context lengths in tokens.")
@click.option("--batches", default=BATCHES, show_default=True, help="Batch sizes.")
@click.option("--dtype", type=click.Choice(["bfloat16", "float16", "float32"]), default="bfloat16",
              show_default=True)
@click.option("--backend", type=click.Choice(["auto", "torch", "triton"]), default="auto", show_default=True,
              help="auto: Triton on a GPU, the torch path on CPU.")
@click.option("--max-kv-gib", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Skip points whose KV cache is larger (default: 1 GiB on CPU, 40%% of GPU memory / 2.5).")
@seed_option
@click.option("--out", type=click.Path(dir_okay=False), default=None, help="Write the result as JSON here.")
def bench_attention(models, contexts, batches, dtype, backend, max_kv_gib, seed, out):
    """Decode attention over paged KV: time, GB/s of KV read, % of the device's peak bandwidth, and the
    speed ratio to torch SDPA on contiguous KV measured in the same run."""
    import torch

    from reference_impl.atomic import check_writable_file, write_json_atomic
    from repro.attention.bench import MODEL_HEADS, run_attention_bench
    from repro.progress import live_bar, say

    if out:
        check_writable_file(out, "--out")
    model_names = [m.strip() for m in models.split(",") if m.strip()]
    unknown = [m for m in model_names if m not in MODEL_HEADS]
    if unknown or not model_names:
        raise click.BadParameter(f"unknown model {unknown}; choose from {', '.join(MODEL_HEADS)}",
                                 param_hint="--models")
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if max_kv_gib is None:
        max_kv_bytes = (0.4 * torch.cuda.get_device_properties(device).total_memory / 2.5
                        if device.type == "cuda" else 2**30)
    else:
        max_kv_bytes = max_kv_gib * 2**30
    if backend == "triton" and device.type == "cpu":
        raise click.BadParameter("the Triton backend runs only in its interpreter on CPU, far too slow to "
                                 "benchmark; use --backend torch or run on a GPU", param_hint="--backend")
    resolved = ("triton" if device.type == "cuda" else "torch") if backend == "auto" else backend

    header = (f"{'model':<11}{'ctx':>7}{'batch':>6}{'KV MiB':>9}{'ms':>10}{'GB/s':>8}{'% peak':>8}"
              f"{'SDPA ms':>10}{'vs SDPA':>9}")
    if device.type == "cuda":
        header += f"{'graph ms':>10}{'% peak':>8}{'vs SDPA':>9}"

    def show(p):
        row = f"{p.model:<11}{p.context_tokens:>7}{p.batch:>6}{p.kv_bytes / 2**20:>9.0f}"
        if p.skipped:
            row += f"  skipped: {p.skipped}"
        else:
            row += (f"{p.time_ms:>10.3f}{p.achieved_gb_s:>8.1f}{p.pct_of_peak:>8.1f}{p.sdpa_time_ms:>10.3f}"
                    f"{p.speedup_vs_sdpa:>8.2f}x")
            if p.graph_time_ms is not None:
                row += f"{p.graph_time_ms:>10.3f}{p.graph_pct_of_peak:>8.1f}{p.graph_speedup_vs_sdpa:>8.2f}x"
        say(bar, row, click.echo)
        bar.update(1)

    context_lens = parse_int_list(contexts, "--contexts", minimum=1)
    batch_sizes = parse_int_list(batches, "--batches", 1)
    click.echo(f"decode attention, {dtype}, backend {resolved} on {device}")
    click.echo(header)
    click.echo("-" * len(header))
    total = len(model_names) * len(context_lens) * len(batch_sizes)
    with live_bar(desc="bench attention", total=total, unit="point") as bar:
        result = run_attention_bench(
            model_names, context_lens, batch_sizes,
            dtype=getattr(torch, dtype), backend=resolved, max_kv_bytes=max_kv_bytes, device=device, seed=seed,
            progress=show)
    click.echo(f"peak bandwidth {result.peak_gb_s:.1f} GB/s ({result.peak_source})")
    if out:
        click.echo(f"wrote {write_json_atomic(out, result.to_dict())}")
