import click

from reference_impl.sim.systems import SYSTEMS


@click.command()
@click.option("--workload", "workload_path", required=True, type=click.Path(dir_okay=False),
              help="JSONL requests (repro workloads generate).")
@click.option("--system", type=click.Choice(sorted(SYSTEMS)), default="infinite-llm", show_default=True)
@click.option("--model", default="llama2-7b", show_default=True)
@click.option("--gpu", default="A100-80GB-SXM", show_default=True)
@click.option("--gpus", "num_gpus", default=4, show_default=True, type=int, help="GPUs in the cluster.")
@click.option("--tp", default=None, type=int, help="Instance tensor parallelism (default: the smallest that "
              "leaves half the memory for KV).")
@click.option("--link", default="inter-node", show_default=True,
              help="Between instances: intra-node, inter-node, or a bandwidth in GB/s.")
@click.option("--out", default=None, type=click.Path(dir_okay=False), help="Write per-request metrics (JSON).")
def simulate(workload_path, system, model, gpu, num_gpus, tp, link, out):
    """Serve a workload file on the simulated cluster and print its summary."""
    from dataclasses import asdict

    from reference_impl.atomic import write_json_atomic
    from reference_impl.backends.sim import simulate as run_sim
    from reference_impl.errors import InputError
    from reference_impl.sim.config import SimConfig, blocks_per_instance
    from reference_impl.sim.systems import cluster, system_config
    from workloads import load_jsonl

    requests = load_jsonl(workload_path)
    if tp is None:
        base = cluster(model, gpu, num_gpus, link=link)
    else:
        if tp < 1 or num_gpus % tp:
            raise InputError(f"--gpus {num_gpus} does not split into instances of --tp {tp}")
        base = SimConfig(model=model, gpu=gpu, num_instances=num_gpus // tp, tp=tp, link=link)
    config = system_config(system, base)
    blocks_per_instance(config)  # checks the model fits the instance before simulating
    result = run_sim(config, requests)
    s = result.summary()
    click.echo(f"{system}: {config.num_instances} instance(s) of tp={config.tp} pp={config.pp}; "
               f"finished {s.num_finished}/{s.num_requests}, rejected {s.num_rejected}, "
               f"{s.output_tok_s:.1f} output tok/s, mean latency {s.mean_latency_s or 0:.3f} s, "
               f"simulated {s.makespan_s:.1f} s")
    if out:
        write_json_atomic(out, {"config": asdict(config), "summary": asdict(s),
                                "requests": [asdict(r) for r in result.requests]})
        click.echo(f"wrote {out}")
