"""The summary (markdown) and the figure of a `repro validate-gpu` result."""


def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:+.1f}%"


def _part_lines(name: str, r: dict) -> list[str]:
    h = r["headline"]
    if name == "attention":
        return [f"- exactness: {h['cases_ok']}/{h['cases']} kernel cases within their bound (Triton and torch vs "
                f"exact fp32 attention, split into random parts and merged by ScaleReduce)",
                f"- decode bandwidth at {h['points_over_1gib']} points of >= 1 GiB of KV: {h['pct_of_peak_min']:.1f}-"
                f"{h['pct_of_peak_max']:.1f}% of {h['peak_gb_s']:.0f} GB/s ({h['peak_source']}), "
                f"{h['speed_vs_sdpa_min']:.2f}-{h['speed_vs_sdpa_max']:.2f}x the speed of SDPA on contiguous KV"]
    if name == "engine":
        return [f"- greedy tokens equal to transformers: one instance {h['one_instance_equal']}/{h['requests']}, "
                f"{r['spilled']['instances']} instances with KV spilled {h['spilled_equal']}/{h['requests']} "
                f"(up to {100 * h['max_remote_fraction']:.0f}% of rBlocks away from their home instance)"]
    if name == "steps":
        lines = [f"- {r['model']} ({r['num_layers']} layers, {r['dtype']}, random weights), measured / predicted by "
                 f"{r['predicted_with']}: decode median {h['decode_median_ratio']:.2f}x over {h['decode_points']} "
                 f"points, prefill median {h['prefill_median_ratio']:.2f}x over {h['prefill_points']}",
                 f"- a decode step's attention reads KV at {h['attention_kv_gb_s_min']:.0f}-"
                 f"{h['attention_kv_gb_s_max']:.0f} GB/s (up to {h['attention_pct_of_peak_max']:.0f}% of "
                 f"{r['peak_gb_s']:.0f} GB/s) at its largest points"]
        if "graph_speedup_median" in h:  # results from before the model runner lack these
            first = next(p for p in r["points"] if p["kind"] == "decode")
            tf_peak = "" if h["prefill_pct_of_peak_max"] is None else \
                f" ({h['prefill_pct_of_peak_max']:.0f}% of {r['peak_tflops']:.0f} TFLOP/s)"
            lines += [f"- a whole decode step (weights + KV read over the step) at batch {first['batch']}, "
                      f"{first['context']} tokens: {first['step_gb_s']:.0f} GB/s, "
                      f"{h['decode_step_pct_of_peak_first']:.0f}% of the HBM peak (best point "
                      f"{h['decode_step_pct_of_peak_max']:.0f}%); worst decode ratio {h['decode_ratio_max']:.2f}x",
                      f"- CUDA graphs: eager / graph step time median {h['graph_speedup_median']:.2f}x (buckets "
                      f"{r['decode_graphs']['buckets']}, captured {len(r['decode_graphs']['captured'])} in "
                      f"{r['decode_graphs']['capture_s']:.1f} s, {r['decode_graphs']['eager_steps']} steps without a graph)",
                      f"- prefill up to {h['prefill_tflops_max']:.1f} TFLOP/s{tf_peak}; the longest prompt "
                      f"{h['prefill_ratio_longest']:.2f}x its prediction"]
        if "packed_prefill" in r:  # results from before packed prefill lack these
            d = r["silu_mul_decode"]
            lines += [f"- several prompts in one prefill step: one SDPA a prompt / varlen median "
                      f"{h['packed_speedup_median']:.2f}x, measured / predicted median {h['packed_ratio_median']:.2f}x",
                      f"- SiLU-mul torch / fused Triton: prefill median {h['silu_mul_prefill_speedup_median']:.2f}x, "
                      f"decode (batch {d['batch']}, {d['context']} tokens) {h['silu_mul_decode_speedup']:.2f}x",
                      "", "| prompts | tokens | packed ms | one SDPA a prompt ms | torch SiLU-mul ms | predicted ms | "
                      "ratio | TFLOP/s |", "|---|---|---|---|---|---|---|---|"]
            for p in r["packed_prefill"]:
                lines.append(f"| {p['prompts']} | {p['tokens']} | {1e3 * p['packed_s']:.2f} | "
                             f"{1e3 * p['per_prompt_s']:.2f} | {1e3 * p['unfused_s']:.2f} | "
                             f"{1e3 * p['predicted_s']:.2f} | {p['ratio']:.2f} | {p['tflops']:.1f} |")
        lines += ["", "| step | batch | tokens | measured ms | eager ms | predicted ms | ratio | attention ms "
                  "(predicted) | KV GB/s | step GB/s or TFLOP/s |", "|---|---|---|---|---|---|---|---|---|---|"]
        for p in r["points"]:
            attn = (f"{1e3 * p['attention_s']:.2f} ({1e3 * p['predicted_attention_s']:.2f}) | "
                    f"{p['attention_kv_gb_s']:.0f}") if p["kind"] == "decode" else "- | -"
            eager = f"{1e3 * p['eager_s']:.2f}" if "eager_s" in p else "-"
            rate = (f"{p['step_gb_s']:.0f} GB/s" if "step_gb_s" in p else
                    f"{p['tflops']:.1f} TFLOP/s" if "tflops" in p else "-")
            lines.append(f"| {p['kind']} | {p['batch']} | {p['context']} | {1e3 * p['measured_s']:.2f} | {eager} | "
                         f"{1e3 * p['predicted_s']:.2f} | {p['ratio']:.2f} | {attn} | {rate} |")
        return lines
    if name == "pooling":
        return [f"- tokens equal to one instance in {h['runs_equal']}/{h['runs']} pooled runs "
                f"({', '.join(str(x['instances']) for x in r['runs'])} instances, every request spilled)",
                f"- one decode step with KV dealt over {h['instances']} instances: {h['pooled_over_local']:.2f}x "
                f"the step with all KV local (batch {r['step']['batch']}, {r['step']['context']} tokens each)"]
    if name == "serving":
        lines = [f"- {r['model']} ({r['dtype']}), trace {r['trace']}, {r['num_requests']} requests at "
                 f"{', '.join(f'{x:g}' for x in r['rates_per_s'])} req/s (saturation "
                 f"{r['saturation']['rate_per_s']:.3g} req/s, {r['saturation']['output_tok_s']:.0f} tok/s)",
                 "", "| rate req/s | measured tok/s | committed | on the spot | TTFT err committed / spot | "
                 "TPOT err committed / spot |", "|---|---|---|---|---|---|"]
        for p in r["points"]:
            c, s = p["committed_error"], p["on_the_spot_error"]
            lines.append(f"| {p['rate_per_s']:g} | {p['measured']['output_tok_s']:.1f} | "
                         f"{p['committed']['output_tok_s']:.1f} ({_pct(c['output_tok_s'])}) | "
                         f"{p['on_the_spot']['output_tok_s']:.1f} ({_pct(s['output_tok_s'])}) | "
                         f"{_pct(c['mean_ttft_s'])} / {_pct(s['mean_ttft_s'])} | "
                         f"{_pct(c['mean_tpot_s'])} / {_pct(s['mean_tpot_s'])} |")
        m = r["median_abs_error"]
        lines += ["", "- median |error| of output tok/s: committed " + f"{100 * m['committed']['output_tok_s']:.1f}%, "
                  f"on the spot {100 * m['on_the_spot']['output_tok_s']:.1f}%"]
        return lines
    return []


def summary_markdown(doc: dict) -> str:
    dev = doc["device"]
    lines = [f"# validate-gpu ({doc['mode']}): {dev['name']}, {doc['date']}", "",
             f"torch {doc['versions']['torch']}, triton {doc['versions']['triton']}, transformers "
             f"{doc['versions']['transformers']}; {doc['total_wall_s']:.0f} s in all; "
             f"{'all parts passed' if doc['passed'] else 'NOT all parts passed'}", ""]
    for name, part in doc["parts"].items():
        lines.append(f"## {name}: {part['status']} ({part['wall_s']:.0f} s of {part['budget_s']} s)")
        if "result" in part:
            lines += _part_lines(name, part["result"])
        else:
            tail = part.get("error", "").strip().splitlines()[-1:] or ["(no output)"]
            lines.append(f"- {tail[0]}")
        lines.append("")
    lines += [f"- {n}" for n in doc.get("notes", [])]
    return "\n".join(lines).rstrip() + "\n"


def draw_figure(doc: dict, path) -> None:
    """(a) engine step measured vs the committed cost model's prediction; (b) output tok/s by rate, measured and
    simulated with both calibrations."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.2))
    steps = doc["parts"].get("steps", {}).get("result")
    if steps:
        for kind, marker in (("decode", "o"), ("prefill", "s")):
            pts = [p for p in steps["points"] if p["kind"] == kind]
            a.scatter([1e3 * p["predicted_s"] for p in pts], [1e3 * p["measured_s"] for p in pts], marker=marker,
                      label=kind)
        values = [1e3 * p[k] for p in steps["points"] for k in ("predicted_s", "measured_s")]
        lo, hi = min(values) / 1.5, max(values) * 1.5
        a.plot([lo, hi], [lo, hi], color="grey", lw=0.8, ls="--", label="measured = predicted")
        a.set(xscale="log", yscale="log", xlabel="predicted step (ms)", ylabel="measured step (ms)",
              title=f"(a) {steps['model']} steps vs {steps['predicted_with'].split(' (')[0]}")
        a.legend(fontsize=8)
    serving = doc["parts"].get("serving", {}).get("result")
    if serving:
        rates = [p["rate_per_s"] for p in serving["points"]]
        for key, label in (("measured", "measured"), ("committed", "simulated: committed calibration"),
                           ("on_the_spot", "simulated: profiled on the spot")):
            b.plot(rates, [p[key]["output_tok_s"] for p in serving["points"]], marker="o", label=label)
        b.set(xlabel="request rate (req/s)", ylabel="output tok/s", title=f"(b) serving trace {serving['trace']}")
        b.legend(fontsize=8)
    fig.suptitle(f"validate-gpu ({doc['mode']}) on {doc['device']['name']}, {doc['date'][:10]}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
