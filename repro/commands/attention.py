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
