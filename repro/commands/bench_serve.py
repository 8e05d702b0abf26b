import json
import math
import time
from functools import partial

import click

from repro.options import parse_int_list

SYSTEMS = ("infinite-llm", "vllm-m", "vllm-s")  # the serving records' systems (serving.schema.json)


def _rates(text: str | None) -> list[float] | None:
    if text is None:
        return None
    try:
        rates = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise click.BadParameter(f"expected comma-separated rates (req/s, or inf), got {text!r}",
                                 param_hint="--rates") from None
    if not rates or min(rates) <= 0:
        raise click.BadParameter("rates must be > 0 (inf: every request at once)", param_hint="--rates")
    return rates


def _server_info(base_url: str, api_key: str | None) -> dict:
    """The endpoint's first model and its max_model_len (from /v1/models); one line when it cannot be reached."""
    import httpx
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        r = httpx.get(base_url.rstrip("/") + "/v1/models", headers=headers, timeout=30)
        r.raise_for_status()
        return r.json()["data"][0]
    except (httpx.HTTPError, KeyError, IndexError, ValueError) as exc:
        raise click.UsageError(f"--base-url {base_url}: GET /v1/models failed ({type(exc).__name__}: {exc})") from None


def _requests(trace_id, dataset_id, num_requests, source, factor, max_tokens, rate_per_s, seed):
    from repro.serving.tasks import workload
    from workloads.scaling import scale_requests
    return scale_requests(workload(trace_id=trace_id, dataset_id=dataset_id, num_requests=num_requests,
                                   rate_per_s=rate_per_s, seed=seed, source=source), factor, max_tokens)


class HttpPoint:
    """The curves' point runner over HTTP: the task's requests replayed against the endpoint; the ServingPoint
    record, and the latency report of the same run kept beside it (`reports`)."""

    def __init__(self, endpoint, slo, log):
        self.endpoint, self.slo, self.log = endpoint, slo, log
        self.reports: list[dict] = []

    def __call__(self, task) -> dict:
        from reference_impl.server.replay import finite_rate, latency_report, prompt_ids, replay
        from reference_impl.serving.points import ServingPoint

        t0 = time.perf_counter()
        replayed = replay(self.endpoint, task.requests, prompt_ids(task.requests, task.seed))
        point = ServingPoint.of_result(task.system, task.rate_per_s, replayed.run, wall_s=time.perf_counter() - t0,
                                       seed=task.seed).to_dict()
        report = {"system": task.system, "rate_per_s": finite_rate(task.rate_per_s), "seed": task.seed,
                  "label": task.label, **latency_report(replayed, self.slo)}
        self.reports.append(report)
        if replayed.errors:
            self.log(f"  {len(replayed.errors)} requests failed, e.g. {replayed.errors[0]}")
        return point


@click.command("serve")
@click.option("--base-url", required=True, help="The server, e.g. http://127.0.0.1:8000 (ours, or `vllm serve`).")
@click.option("--model", "model_name", default=None, help="Model id to send (default: the first of /v1/models).")
@click.option("--trace", "trace_id", type=int, default=None, help="Trace id (0-8); default 1 unless --dataset.")
@click.option("--dataset", "dataset_id", type=int, default=None, help="Dataset id (1-18) instead of a trace.")
@click.option("--source", default="fitted", show_default=True, help="Where the trace's lengths come from.")
@click.option("--requests", "num_requests", default=40, show_default=True, type=click.IntRange(2, 100_000))
@click.option("--seeds", default="0", show_default=True, help="Comma-separated seeds (lengths, arrivals, prompts).")
@click.option("--rates", default=None,
              help="Comma-separated request rates (req/s; inf: all at once) instead of the curve method's search.")
@click.option("--instances", default=2, show_default=True, type=click.IntRange(min=1),
              help="Instances behind the endpoint (the scaling rule's unit: max_model_len / instances).")
@click.option("--instance-tokens", default=None, type=click.IntRange(min=2),
              help="KV tokens of one instance the trace's --long-quantile length is scaled to (default: "
                   "max_model_len / --instances, capped so 1.5 of it fits max_model_len).")
@click.option("--long-quantile", default=0.98, show_default=True, type=click.FloatRange(0, 1, min_open=True,
                                                                                       max_open=True))
@click.option("--system", default="infinite-llm", show_default=True, type=click.Choice(SYSTEMS),
              help="The system the records name (ours: infinite-llm; `vllm serve`: vllm-s, or vllm-m).")
@click.option("--slo-ttft-ms", type=float, default=None, help="Goodput SLO: TTFT at most this (ms).")
@click.option("--slo-tpot-ms", type=float, default=None, help="Goodput SLO: TPOT at most this (ms).")
@click.option("--slo-e2e-ms", type=float, default=None, help="Goodput SLO: end-to-end latency at most this (ms).")
@click.option("--api-key", default=None, envvar="OPENAI_API_KEY", help="Bearer token, where the server wants one.")
@click.option("--out", "out_path", default=None, type=click.Path(dir_okay=False),
              help="Write the record (serving groups + latency reports) here as JSON.")
def bench_serve(base_url, model_name, trace_id, dataset_id, source, num_requests, seeds, rates, instances,
                instance_tokens, long_quantile, system, slo_ttft_ms, slo_tpot_ms, slo_e2e_ms, api_key, out_path):
    """Replay a trace or dataset against any OpenAI-compatible endpoint with streaming, by the simulator's
    curve method: the serving-point records, and TTFT, TPOT, ITL, e2e (p50, p99), output tok/s and goodput
    under the SLO given.

    The curve method: rates from light load to the plateau, a steady-state window, every seed (--rates instead
    runs the rates given). Lengths are scaled so the trace's --long-quantile length fills one instance."""
    from reference_impl.atomic import check_writable_file, write_json_atomic
    from reference_impl.server.replay import Endpoint, Slo, finite_rate
    from reference_impl.sim.config import SimConfig, sim_engine
    from repro.serving.curves import CurveGroup, run_curves
    from repro.serving.plateau import max_tput_tok_s
    from repro.serving.sweep import in_process
    from repro.serving.tasks import PointTask, RequestSpec
    from workloads.generate import check_dataset_id, check_trace_id
    from workloads.scaling import max_tokens_for, scale_factor

    if trace_id is not None and dataset_id is not None:
        raise click.UsageError("give --trace or --dataset, not both")
    if dataset_id is None and trace_id is None:
        trace_id = 1
    check_trace_id(trace_id) if trace_id is not None else check_dataset_id(dataset_id)
    seed_list = tuple(parse_int_list(seeds, "--seeds"))
    rate_list = _rates(rates)
    if out_path:
        check_writable_file(out_path)
    info = _server_info(base_url, api_key)
    model_name = model_name or info["id"]
    max_len = int(info.get("max_model_len") or 2048)
    tokens = instance_tokens or max_len // instances
    tokens = min(tokens, 2 * max_len // 3)  # the cap (1.5 instances) must fit one request of the server
    max_tokens = max_tokens_for(tokens)
    factor = scale_factor(trace_id=trace_id, dataset_id=dataset_id, instance_tokens=tokens, quantile=long_quantile,
                          source=source)
    endpoint = Endpoint(base_url, model_name, api_key)
    slo = Slo(slo_ttft_ms, slo_tpot_ms, slo_e2e_ms)
    runner = HttpPoint(endpoint, slo, click.echo)
    which = {"trace_id": trace_id} if trace_id is not None else {"dataset_id": dataset_id}
    label = f"{base_url} {'trace ' + str(trace_id) if trace_id is not None else 'dataset ' + str(dataset_id)}"
    group_info = {**which, "panel": label, "model": model_name, "num_gpus": instances, "baseline": "vllm-m",
                  "num_requests": num_requests, "instance_tokens": tokens, "long_quantile": long_quantile,
                  "scale_factor": factor, "max_tokens": max_tokens}
    make = partial(_requests, trace_id, dataset_id, num_requests, source, factor, max_tokens)
    base = SimConfig(engine=sim_engine(num_instances=instances))
    click.echo(f"{label}: model {model_name}, max_model_len {max_len}; lengths x{factor:.3g} (the "
               f"{long_quantile:g} quantile -> {tokens} tokens), at most {max_tokens} tokens a request", err=True)
    t0 = time.perf_counter()
    if rate_list is None:
        group = CurveGroup(group_info, base, make, (system,), label, runner=runner, start_rate_per_s=math.inf)
        record = run_curves([group], seed_list, click.echo)[0]
    else:
        sweep = in_process(click.echo)
        tasks = [PointTask(system, base, RequestSpec(make, rate, seed), rate, label, seed, runner)
                 for seed in seed_list for rate in rate_list]
        points = sweep.run(sweep.points(tasks))
        record = {**group_info, "num_instances": instances, "tp": 1, "rates_per_s": rate_list,
                  "seeds": list(seed_list), "points": points, "max_tput_ratio": None,
                  "max_tput_tok_s": {system: [max_tput_tok_s(points, s) for s in seed_list]}}
    record = {**record, "rates_per_s": [finite_rate(r) for r in record["rates_per_s"]],
              "points": [{**p, "rate_per_s": finite_rate(p["rate_per_s"])} for p in record["points"]]}
    result = {"base_url": base_url, "model": model_name, "max_model_len": max_len, "wall_s": time.perf_counter() - t0,
              "slo": {"ttft_ms": slo_ttft_ms, "tpot_ms": slo_tpot_ms, "e2e_ms": slo_e2e_ms},
              "groups": [record], "reports": runner.reports}
    _echo_table(runner.reports)
    if out_path:
        write_json_atomic(out_path, result)
        click.echo(f"wrote {out_path}", err=True)


def _echo_table(reports: list[dict]) -> None:
    def ms(d):
        return "-" if d["p50"] is None else f"{d['p50']:.1f}/{d['p99']:.1f}"
    click.echo(f"{'rate/s':>8} {'seed':>4} {'done':>6} {'TTFT ms p50/p99':>17} {'TPOT ms':>13} {'ITL ms':>13} "
               f"{'e2e ms':>15} {'out tok/s':>9} {'goodput/s':>9}")
    for r in reports:
        rate = r["rate_per_s"] if isinstance(r["rate_per_s"], str) else f"{r['rate_per_s']:.4g}"
        click.echo(f"{rate:>8} {r['seed']:>4} {r['num_finished']:>6} {ms(r['ttft_ms']):>17} {ms(r['tpot_ms']):>13} "
                   f"{ms(r['itl_ms']):>13} {ms(r['e2e_ms']):>15} {r['output_tok_s']:>9.1f} {r['goodput_req_s']:>9.2f}")


def _series(record: dict, key):
    """(system, [(rate, value)]) of one `bench serve` record, rates ascending (inf last); `key(point, report)`."""
    group = record["groups"][0]
    reports = {(r["rate_per_s"] if isinstance(r["rate_per_s"], str) else float(r["rate_per_s"]), r["seed"]): r
               for r in record["reports"]}
    rows = []
    for p in group["points"]:
        rate = float(p["rate_per_s"])  # "inf" (a burst) included
        report = reports.get(("inf" if math.isinf(rate) else float(rate), p["seed"]))
        if report is not None:
            rows.append((rate, key(p, report)))
    return group["points"][0]["system"], sorted(rows, key=lambda r: r[0])


@click.command("serve-plot")
@click.argument("records", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--figures-dir", default="figures", show_default=True)
@click.option("--name", default="serve-http", show_default=True, help="Figure file name (png and pdf).")
def bench_serve_plot(records, figures_dir, name):
    """Draw `repro bench serve` records side by side (steady output tok/s, p50 TTFT and TPOT against the offered
    rate) and print the ratios of the first record to each other one."""
    from repro.framework.figures import new_figure, save
    from repro.serving.plots import PALETTE

    loaded = [json.loads(open(path).read()) for path in records]
    finite = [float(p["rate_per_s"]) for r in loaded for p in r["groups"][0]["points"]
              if math.isfinite(float(p["rate_per_s"]))]
    burst_x = 2 * max(finite) if finite else 1.0
    panels = [("steady output tok/s", lambda p, r: p["steady_output_tok_s"]),
              ("TTFT p50 (ms)", lambda p, r: r["ttft_ms"]["p50"]), ("TPOT p50 (ms)", lambda p, r: r["tpot_ms"]["p50"])]
    fig, axes = new_figure(len(panels), 3.4, 2.8)
    for ax, (label, key) in zip(axes, panels):
        for i, record in enumerate(loaded):
            system, rows = _series(record, key)
            xs = [burst_x if math.isinf(rate) else rate for rate, _ in rows]
            ax.plot(xs, [v for _, v in rows], marker="o", ms=3, lw=1, color=PALETTE.get(system),
                    label=f"{system} ({record['base_url']})" if i < 2 else system)
        ax.set_xscale("log")
        ticks = sorted(set(finite)) + [burst_x]
        ax.set_xticks(ticks, [f"{t:g}" for t in ticks[:-1]] + ["burst"])
        ax.minorticks_off()
        ax.set_xlabel("offered request rate (req/s; burst: all at once)", fontsize=7)
        ax.set_ylabel(label, fontsize=7)
        ax.tick_params(labelsize=6)
    axes[0].legend(fontsize=5)
    g = loaded[0]["groups"][0]
    fig.suptitle(f"trace {g.get('trace_id', g.get('dataset_id'))} over HTTP, model {g['model']}", fontsize=8)
    for path in save(fig, figures_dir, name):
        click.echo(f"wrote {path}")
    first = loaded[0]
    for other in loaded[1:]:
        a, b = first["groups"][0]["max_tput_tok_s"], other["groups"][0]["max_tput_tok_s"]
        (sa, va), (sb, vb) = next(iter(a.items())), next(iter(b.items()))
        click.echo(f"max throughput {sa} / {sb}: {max(va):.1f} / {max(vb):.1f} tok/s = {max(va) / max(vb):.2f}x")
        for label, key in panels[1:]:
            ra, rb = dict(_series(first, key)[1]), dict(_series(other, key)[1])
            ratios = ", ".join(f"{'burst' if math.isinf(rate) else f'{rate:g}/s'} {ra[rate] / rb[rate]:.2f}x"
                               for rate in sorted(set(ra) & set(rb)) if ra[rate] and rb[rate])
            click.echo(f"{label} {sa} / {sb}: {ratios}")
