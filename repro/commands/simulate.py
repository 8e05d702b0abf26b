import json
import textwrap
from dataclasses import asdict, replace

import click

from reference_impl.errors import InputError
from reference_impl.calibration.links import DEFAULT_LINK, check_link
from reference_impl.systems.catalog import DESIGN_NAMES

# DistServe's chatbot SLO (reference_impl/systems/pd_disagg/headline.py CHATBOT_SLO), the default stated SLO
SLO_TTFT_MS, SLO_TPOT_MS = 250.0, 100.0


def _check_link(_ctx, _param, value):
    try:
        return check_link(value)
    except InputError as exc:
        raise click.BadParameter(f"{exc}; give intra-node, inter-node or a bandwidth in GB/s > 0") from None


def _ms(value) -> str:
    return "-" if value is None else f"{value:.1f}"


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
@click.option("--knob", "knobs", multiple=True, metavar="NAME=VALUE",
              help="One of the design's own options (repeatable): pd-disaggregation num_prefill, prefill_tp, ...; "
                   "lamina memory_devices, ...; loongserve max_degree, ring_link; llumnix enable_migration, ... "
                   "A wrong name lists the design's knobs.")
@click.option("--slo-ttft-ms", default=SLO_TTFT_MS, show_default=True, type=click.FloatRange(min=0, min_open=True),
              help="The SLO of the goodput: time to first token (default: DistServe's chatbot).")
@click.option("--slo-tpot-ms", default=SLO_TPOT_MS, show_default=True, type=click.FloatRange(min=0, min_open=True),
              help="The SLO of the goodput: time per output token after the first.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (configuration, summary, SLO, goodput, "
              "design counters) instead of the text.")
@click.option("--out", default=None, type=click.Path(dir_okay=False), help="Write per-request metrics (JSON).")
def simulate(workload_path, system, model, gpu, num_gpus, tp, link, knobs, slo_ttft_ms, slo_tpot_ms, as_json, out):
    """Serve a workload file on the simulated cluster and print what the design chose and how it served.

    Printed: the configuration the design chose (a PD split, a ring degree, memory devices, its knobs), both output
    rates by name (steady state: what `repro run`, `report` and the figures use; makespan: vLLM benchmarks'), TTFT
    and TPOT p50/p99, the SLO attainment and goodput, and the design's own counters."""
    from reference_impl.atomic import check_writable_file, write_json_atomic
    from reference_impl.sim.config import SimConfig, blocks_per_instance, sim_engine
    from reference_impl.systems.pd_disagg.headline import Slo, attainment
    from reference_impl.systems.run import simulate as run_sim
    from reference_impl.systems.registry import cluster, system_config
    from reference_impl.systems.catalog import design
    from repro.design_knobs import describe, parse_knobs
    from repro.progress import progress
    from workloads import load_jsonl

    if out:
        check_writable_file(out, "--out")  # before the run, not after it
    design_knobs = parse_knobs(system, knobs)  # before reading the workload: a wrong knob fails at once
    requests = load_jsonl(workload_path, progress=lambda lines, **kw: progress(lines, unit="line", **kw))
    if tp is None:
        base = cluster(model, gpu, num_gpus, link=link)
    else:
        if num_gpus % tp:
            raise InputError(f"--gpus {num_gpus} does not split into instances of --tp {tp}")
        base = SimConfig(model=model, gpu=gpu, tp=tp, link=link, engine=sim_engine(num_instances=num_gpus // tp))
    base = replace(base, design_knobs=design(system).knobs_for(requests, design_knobs))
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
    slo = Slo(ttft_s=slo_ttft_ms / 1e3, tpot_s=slo_tpot_ms / 1e3)
    attained = attainment(result, slo)
    goodput_req_s = attained * s.num_requests / s.makespan_s if s.makespan_s > 0 else 0.0
    chosen = describe(config)
    report = {"system": system, "configuration": chosen, "summary": s.to_dict(),
              "slo": {"ttft_ms": slo_ttft_ms, "tpot_ms": slo_tpot_ms, "attainment": attained,
                      "goodput_req_s": goodput_req_s},
              "design_counters": dict(result.design_counters)}
    if as_json:
        click.echo(json.dumps(report, default=str))
    else:
        echo_report(chosen, s, report["slo"], result.design_counters)
    if out:
        write_json_atomic(out, {"config": asdict(config), **report, "requests": [asdict(r) for r in result.requests]})
        if not as_json:
            click.echo(f"wrote {out}")


def echo_report(chosen: dict, s, slo: dict, counters: dict) -> None:
    click.echo(f"{chosen['design']} on {chosen['num_gpus']} GPUs: {chosen['num_instances']} instance(s) of "
               f"tp={chosen['tp']} pp={chosen['pp']}, link {chosen['link']}, pooling {'on' if chosen['pooling'] else 'off'}")
    if "split" in chosen:
        click.echo(f"  split: {chosen['split']} (searched for {chosen['split_for']})")
    if "memory_devices_per_instance" in chosen:
        click.echo(f"  memory devices: {chosen['memory_devices_per_instance']} per instance")
    if "ring_degree" in chosen:
        click.echo(f"  ring degree: up to {chosen['ring_degree']} instances, ring link {chosen['ring_link']}")
    if "knobs" in chosen:
        click.echo("  knobs: " + " ".join(f"{k}={v}" for k, v in chosen["knobs"].items() if k != "workload"))
    click.echo(f"requests: {s.num_finished} finished, {s.num_rejected} rejected, {s.num_unfinished} unfinished "
               f"of {s.num_requests}")
    click.echo(f"output rate, steady state: {s.steady_output_tok_s:.1f} tok/s over its {s.steady_window_s:.1f} s window "
               f"(what repro run, report and the figures use)")
    click.echo(f"output rate, makespan:     {s.output_tok_s:.1f} tok/s over {s.makespan_s:.1f} s (vLLM benchmarks')")
    click.echo(f"TTFT ms: p50 {_ms(s.p50_ttft_ms)}, p99 {_ms(s.p99_ttft_ms)}; "
               f"TPOT ms: p50 {_ms(s.p50_tpot_ms)}, p99 {_ms(s.p99_tpot_ms)}")
    click.echo(f"SLO TTFT <= {slo['ttft_ms']:g} ms and TPOT <= {slo['tpot_ms']:g} ms: {100 * slo['attainment']:.1f}% "
               f"of requests meet it; goodput {slo['goodput_req_s']:.3g} req/s (those requests over the makespan)")
    if counters:
        text = ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in counters.items())
        click.echo(textwrap.fill(text, width=110, initial_indent="design counters: ", subsequent_indent="  "))
