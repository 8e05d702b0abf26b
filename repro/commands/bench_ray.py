"""`repro bench ray`: how the Ray backend scales with instances at the same load per instance.

Each count N runs the same requests per instance on one N-instance Ray engine and, in the same run, on N
independent single-instance Ray engines (the reference: what N machines without a shared cluster would give);
the tokens must equal a local run. `--model device-time:20ms` makes each step cost 20 ms of device time and
almost no CPU, so the engine's own coordination is what scales (or does not) beyond the cores at hand.
`--pooling on` gives the even instances requests larger than their memory and the odd ones room to lend: the
debtors' KV spreads over creditors and each debtor step runs remote MicroAttention."""
import json
import os
from dataclasses import asdict

import click

from reference_impl.errors import InputError


@click.command("ray")
@click.option("--model", "model_spec", default="random", show_default=True,
              help="random (a random LLaMA: --layers, --hidden), tiny, device-time:<N>ms, or a Hugging Face folder.")
@click.option("--instances", "instance_counts", default="1,2", show_default=True,
              help="Comma-separated instance counts to measure.")
@click.option("--pooling", type=click.Choice(["off", "on"]), default="off", show_default=True,
              help="on: the even instances' requests outgrow them and spread over the odd ones.")
@click.option("--requests-per-instance", default=8, show_default=True, type=click.IntRange(min=1))
@click.option("--prompt-len", default=32, show_default=True, type=click.IntRange(min=1))
@click.option("--max-new-tokens", default=32, show_default=True, type=click.IntRange(min=2))
@click.option("--layers", default=8, show_default=True, type=click.IntRange(min=1))
@click.option("--hidden", default=1024, show_default=True, type=click.IntRange(min=64))
@click.option("--block-size", default=16, show_default=True, type=click.IntRange(min=1))
@click.option("--repeats", default=3, show_default=True, type=click.IntRange(min=1))
@click.option("--reference/--no-reference", default=True, show_default=True,
              help="Also run N independent single-instance engines (pooling off only).")
@click.option("--address", default=None, help="A Ray cluster to join (default: start one here).")
@click.option("--ray-cpus", default=os.cpu_count() or 2, show_default=True, type=click.IntRange(min=1))
@click.option("--seed", default=0, show_default=True, type=int)
@click.option("--out", type=click.Path(dir_okay=False), default=None, help="Also write the runs as JSON.")
def bench_ray(model_spec, instance_counts, pooling, requests_per_instance, prompt_len, max_new_tokens, layers,
              hidden, block_size, repeats, reference, address, ray_cpus, seed, out):
    """tok/s of 1, 2, ... instances with the same requests per instance on Ray, beside N independent engines, and
    where a step's time goes: control phase, compute, waiting for partners, messaging."""
    import ray
    import torch

    from reference_impl.atomic import check_writable_file, write_text_atomic
    from reference_impl.backends.ray import RayConfig, init_ray
    from repro.benchmarks.ray_scaling import (ScalingRun, bench_model, load_average, pooled_workload, run_engine,
                                              run_independent, uniform_workload)

    try:
        counts = [int(n) for n in instance_counts.split(",")]
    except ValueError:
        raise InputError(f"--instances must be comma-separated integers, got {instance_counts!r}") from None
    if not counts or min(counts) < 1:
        raise InputError("--instances must list counts >= 1")
    if pooling == "on" and min(counts) < 2:
        raise InputError("--pooling on needs --instances of at least 2 (a debtor and a creditor)")
    if out:
        check_writable_file(out, "--out")  # before minutes of runs
    model, reference_model = bench_model(model_spec, layers, hidden, seed)
    torch.set_num_threads(1)
    ray_config = RayConfig(address=address, num_cpus=ray_cpus, cpus_per_instance=min(1.0, ray_cpus / max(counts)))
    started = init_ray(ray_config)
    runs = []
    try:
        for n in counts:
            shape = (model, n, requests_per_instance, prompt_len, max_new_tokens, block_size, seed)
            work = pooled_workload(*shape) if pooling == "on" else uniform_workload(*shape)
            load_before = load_average()
            stats = run_engine(model, reference_model, work, ray_config, repeats)
            independent = None
            if reference and pooling == "off":
                independent = run_independent(model, work, ray_config, repeats)
            runs.append(ScalingRun.make(n, pooling, model_spec, stats, independent, load_before, load_average()))
    finally:
        if started:
            ray.shutdown()
    base = runs[0].tok_s / runs[0].num_instances
    click.echo(f"{'inst':>4} {'pool':>4} {'tok/s':>8} {'eff':>5} {'indep tok/s':>11} {'vs indep':>8} {'step ms':>7} "
               f"{'ctrl ms':>7} {'compute':>7} {'wait ms':>7} {'msg ms':>6}  load")
    for r in runs:
        indep = f"{r.independent_tok_s:11.1f} {r.tok_s / r.independent_tok_s:8.2f}" if r.independent_tok_s else \
            f"{'-':>11} {'-':>8}"
        click.echo(f"{r.num_instances:4d} {r.pooling:>4} {r.tok_s:8.1f} {r.tok_s / (r.num_instances * base):5.2f} "
                   f"{indep} {r.step_ms:7.1f} {r.control_ms:7.2f} {r.compute_ms:7.1f} {r.wait_ms:7.2f} "
                   f"{r.messaging_ms:6.2f}  {r.load_before:.1f}-{r.load_after:.1f}")
    for r in runs:
        if r.pooling == "on":
            click.echo(f"{r.num_instances:4d} instances, pooling on: debtor step {r.debtor_step_ms:.1f} ms, of which "
                       f"{r.debtor_wait_ms:.2f} waiting for creditors; a creditor's work per served step "
                       f"{r.served_compute_ms:.2f} ms; creditor step {r.creditor_step_ms:.1f} ms; "
                       f"{r.num_moved_blocks} blocks moved; {r.peer_calls_per_step:.2f} waiting peer calls a step"
                       + (f", {r.peer_call_ms:.2f} ms each" if r.peer_call_ms is not None else ""))
    if out:
        rows = [{**asdict(r), "efficiency": r.tok_s / (r.num_instances * base)} for r in runs]
        write_text_atomic(out, json.dumps(rows, indent=1) + "\n")
        click.echo(f"wrote {out}")
