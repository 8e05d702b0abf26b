from dataclasses import asdict

import click

from reference_impl.errors import InputError
from reference_impl.calibration.links import DEFAULT_LINK, check_link
from reference_impl.systems.catalog import DESIGN_NAMES



def _check_link(_ctx, _param, value):
    try:
        return check_link(value)
    except InputError as exc:
        raise click.BadParameter(f"{exc}; give intra-node, inter-node or a bandwidth in GB/s > 0") from None


@click.command()
@click.option("--workload", "workload_path", required=True, type=click.Path(dir_okay=False),
              help="JSONL requests (repro workloads generate).")
@click.option("--system", type=click.Choice(DESIGN_NAMES), default="infinite-llm", show_default=True)
@click.option("--model", default="llama2-7b", show_default=True)
@click.option("--gpu", default="A100-80GB-SXM", show_default=True)
@click.option("--gpus", "num_gpus", default=4, show_default=True, type=click.IntRange(min=1),
              help="GPUs in the cluster.")
@click.option("--tp", default=None, type=click.IntRange(min=1), help="Instance tensor parallelism (default: the smallest that "
              "leaves half the memory for KV).")
@click.option("--link", default=DEFAULT_LINK, show_default=True, callback=_check_link,
              help="Between instances: intra-node, inter-node, or a bandwidth in GB/s.")
@click.option("--out", default=None, type=click.Path(dir_okay=False), help="Write per-request metrics (JSON).")
def simulate(workload_path, system, model, gpu, num_gpus, tp, link, out):
    """Serve a workload file on the simulated cluster and print its summary."""
    from reference_impl.atomic import check_writable_file, write_json_atomic
    from reference_impl.sim.config import SimConfig, blocks_per_instance, sim_engine
    from reference_impl.systems.run import simulate as run_sim
    from reference_impl.systems.registry import cluster, system_config
    from repro.progress import progress
    from workloads import load_jsonl

    if out:
        check_writable_file(out, "--out")  # before the run, not after it
    requests = load_jsonl(workload_path, progress=lambda lines, **kw: progress(lines, unit="line", **kw))
    if tp is None:
        base = cluster(model, gpu, num_gpus, link=link)
    else:
        if num_gpus % tp:
            raise InputError(f"--gpus {num_gpus} does not split into instances of --tp {tp}")
        base = SimConfig(model=model, gpu=gpu, tp=tp, link=link, engine=sim_engine(num_instances=num_gpus // tp))
    config = system_config(system, base)
    blocks_per_instance(config)  # checks the model fits the instance before simulating
    last_arrival_s = max(r.arrival_s for r in requests)
    with progress(desc="simulate", unit="event") as bar:  # events done and the simulated clock
        def on_event(now_s):
            bar.update(1)
            if bar.n % 1000 == 0:
                bar.set_postfix_str(f"t={now_s:.0f}s, last arrival {last_arrival_s:.0f}s", refresh=False)
        result = run_sim(config, requests, on_event=None if bar.disable else on_event)
    s = result.summary()
    click.echo(f"{system}: {config.engine.num_instances} instance(s) of tp={config.tp} pp={config.pp}; "
               f"finished {s.num_finished}/{s.num_requests}, rejected {s.num_rejected}, "
               f"{s.output_tok_s:.1f} output tok/s, mean latency {s.mean_latency_s or 0:.3f} s, "
               f"simulated {s.makespan_s:.1f} s")
    if out:
        write_json_atomic(out, {"config": asdict(config), "summary": asdict(s),
                                "requests": [asdict(r) for r in result.requests]})
        click.echo(f"wrote {out}")
