import dataclasses
import json
import math

import click

from reference_impl.errors import InputError
from repro.options import seed_option
from workloads.paper_tables import DATASETS, DATASETS_SOURCE, TRACES, TRACES_SOURCE
from workloads.sources.options import SOURCES, SourceOptions
from workloads.tokens import make_token_counter

MAX_REQUESTS = 50_000_000  # about 10 GB of Request objects; beyond that the machine runs out of memory, not us


def source_options(func):
    func = click.option("--tokenizer", "tokenizer_path", type=click.Path(dir_okay=False),
                        help="Local tokenizer.json for real token counts (default: 4 chars/token estimate).")(func)
    func = click.option("--leval-file", type=click.Path(dir_okay=False),
                        help="Local L-Eval records (.json/.jsonl) for trace 3.")(func)
    func = click.option("--sharegpt-file", type=click.Path(dir_okay=False),
                        help="Local ShareGPT conversations (.json, may be cut off, or .jsonl) for traces 0-2.")(func)
    return click.option("--source", type=click.Choice(SOURCES), default="auto", show_default=True,
                        help="auto: real data where it can be had, else fitted; fitted: never real data.")(func)


@click.group()
def workloads():
    """The nine traces (infinite-llm Table 1) and eighteen datasets (distkv-llm Table 2)."""


@workloads.command("list")
@source_options
def list_(source, sharegpt_file, leval_file, tokenizer_path):
    """Every trace and dataset with its source and parameters."""
    from workloads import traces
    from workloads.generate import real_source

    options = SourceOptions(source, sharegpt_file, leval_file, tokenizer_path)
    click.echo(f"Traces ({TRACES_SOURCE}); token counts: {make_token_counter(tokenizer_path)[1]}")
    click.echo(f"{'trace':>5} {'group':>5} {'range':>13} {'avg':>8} {'sd':>10}  origin / generated from")
    for row in TRACES.values():
        click.echo(f"{row.trace_id:>5} {row.group:>5} {f'{row.min_len}-{row.max_len}':>13} {row.avg_len:>8.0f} "
                   f"{row.sd_len:>10.2f}  {row.origin} / {traces.method(row.trace_id, real_source(row.trace_id, options))}")
    click.echo(f"\nDatasets ({DATASETS_SOURCE}); {DATASETS[1].num_requests} requests each; generated from: lengths "
               "uniform within each range, exactly ratio * n long, outputs from ShareGPT V3 reply lengths (fitted)")
    click.echo(f"{'dataset':>7} {'model':>10} {'gpus':>4} {'normal range':>14} {'long range':>17} {'long':>5}")
    for row in DATASETS.values():
        normal, long = row.normal_range, row.long_range
        click.echo(f"{row.dataset_id:>7} {row.model:>10} {row.num_gpus:>4} {f'{normal[0]}-{normal[1]}':>14} "
                   f"{f'{long[0]}-{long[1]}':>17} {row.long_ratio:>5.0%}")


@workloads.command("generate")
@click.option("--trace", "trace_id", type=int, help="Trace id 0-8 (infinite-llm Table 1).")
@click.option("--dataset", "dataset_id", type=int, help="Dataset id 1-18 (distkv-llm Table 2).")
@click.option("--num-requests", type=click.IntRange(1, MAX_REQUESTS), default=1000, show_default=True)
@click.option("--rate", "rate_per_s", type=float, required=True, help="Mean arrival rate, requests/s (inf: all at 0).")
@click.option("--burstiness", type=float, default=1.0, show_default=True, help="Gamma shape of the gaps; 1.0 = Poisson.")
@seed_option
@click.option("--out", "out_path", type=click.Path(dir_okay=False), required=True, help="JSONL file to write.")
@source_options
def generate_cmd(trace_id, dataset_id, num_requests, rate_per_s, burstiness, seed, out_path, source, sharegpt_file,
                 leval_file, tokenizer_path):
    """Generate one trace or dataset and write it as JSONL (atomically)."""
    from reference_impl.atomic import check_writable_file
    from repro.progress import progress
    from workloads import datasets, traces
    from workloads.generate import check_dataset_id, check_trace_id, generate, real_source
    from workloads.io import save_jsonl

    if (trace_id is None) == (dataset_id is None):
        raise InputError("give exactly one of --trace N or --dataset N")
    if not rate_per_s > 0:
        raise InputError(f"--rate must be > 0 requests/s (inf: all at t=0), got {rate_per_s}")
    if not (math.isfinite(burstiness) and burstiness > 0):
        raise InputError(f"--burstiness must be a finite number > 0, got {burstiness}")
    if trace_id is not None:
        check_trace_id(trace_id)
    else:
        check_dataset_id(dataset_id)
    check_writable_file(out_path, "--out", make_dirs=False)
    options = SourceOptions(source, sharegpt_file, leval_file, tokenizer_path)
    with progress(desc="generate", total=2, unit="stage") as bar:
        requests = generate(trace_id=trace_id, dataset_id=dataset_id, num_requests=num_requests,
                            rate_per_s=rate_per_s, seed=seed, burstiness=burstiness, options=options)
        bar.update(1)
        save_jsonl(out_path, progress(requests, desc=f"write {out_path}", unit="req"))
        bar.update(1)
    what = f"trace {trace_id}" if trace_id is not None else f"dataset {dataset_id}"
    how = traces.method(trace_id, real_source(trace_id, options)) if trace_id is not None else datasets.method(dataset_id)
    rate = "inf" if math.isinf(rate_per_s) else f"{rate_per_s:g}"
    click.echo(f"wrote {len(requests)} requests of {what} ({how}; rate {rate}/s, seed {seed}) to {out_path}")


@workloads.command("stats")
@click.option("--num-requests", type=click.IntRange(1, MAX_REQUESTS), default=20000, show_default=True)
@seed_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@source_options
def stats(num_requests, seed, as_json, source, sharegpt_file, leval_file, tokenizer_path):
    """Generated context lengths of every trace next to Table 1, and long ratios of every dataset."""
    from repro.progress import progress
    from workloads.stats import dataset_stats, trace_stats

    options = SourceOptions(source, sharegpt_file, leval_file, tokenizer_path)
    trace_rows = [trace_stats(t, num_requests, seed, options) for t in progress(TRACES, desc="traces")]
    dataset_rows = [dataset_stats(d, DATASETS[d].num_requests, seed) for d in progress(DATASETS, desc="datasets")]
    if as_json:
        click.echo(json.dumps({"traces": [dataclasses.asdict(r) for r in trace_rows],
                               "datasets": [dataclasses.asdict(r) for r in dataset_rows]}, indent=1))
        return
    click.echo(f"Traces: {num_requests} requests each, seed {seed}; context length = prompt + output tokens")
    click.echo(f"{'trace':>5} {'min':>5} {'paper min':>9} {'max':>8} {'paper max':>9} {'avg':>8} {'paper avg':>9} {'err':>7} "
               f"{'sd':>9} {'paper sd':>9} {'err':>7} {'ok':>3}  generated from")
    for r in trace_rows:
        click.echo(f"{r.trace_id:>5} {r.min_len:>5} {r.paper_min_len:>9} {r.max_len:>8} {r.paper_max_len:>9} {r.avg_len:>8.0f} "
                   f"{r.paper_avg_len:>9.0f} {r.avg_rel_err:>+7.1%} {r.sd_len:>9.0f} {r.paper_sd_len:>9.0f} "
                   f"{r.sd_rel_err:>+7.1%} {'yes' if r.is_within_tolerance else 'NO':>3}  {r.method}")
    click.echo(f"\nDatasets: {DATASETS[1].num_requests} requests each, seed {seed}")
    click.echo(f"{'dataset':>7} {'model':>10} {'gpus':>4} {'long':>5} {'measured':>8} {'min':>7} {'max':>8} {'in ranges':>9}")
    for r in dataset_rows:
        click.echo(f"{r.dataset_id:>7} {r.model:>10} {r.num_gpus:>4} {r.long_ratio:>5.0%} {r.measured_long_ratio:>8.1%} "
                   f"{r.min_len:>7} {r.max_len:>8} {'yes' if r.is_within_ranges else 'NO':>9}")


@workloads.command("check")
@click.argument("path", type=click.Path(dir_okay=False))
def check(path):
    """Load a workload JSONL file, validate every line, and summarise it."""
    from repro.progress import progress
    from workloads.io import load_jsonl
    from workloads.stats import context_lens

    requests = load_jsonl(path, progress=lambda lines, **kw: progress(lines, unit="line", **kw))
    ctx = context_lens(requests)
    span_s = max(r.arrival_s for r in requests) - min(r.arrival_s for r in requests)
    rate = f"{(len(requests) - 1) / span_s:.3g}/s" if span_s > 0 else "all at once"
    click.echo(f"{path}: {len(requests)} requests, context min {ctx.min()} max {ctx.max()} avg {ctx.mean():.0f} "
               f"sd {ctx.std():.0f}, prompt tokens {sum(r.prompt_len for r in requests)}, "
               f"output tokens {sum(r.output_len for r in requests)}, arrival rate {rate}")
