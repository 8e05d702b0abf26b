import click

from repro.options import parse_int_list, seed_option

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
    from repro.benchmarks.attention import MODEL_HEADS, run_attention_bench
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
