"""Fit-error table of a coefficient document: one row per fitted curve, plus the attention rates."""


def fit_error_rows(doc: dict) -> list[dict]:
    rows = []
    for gpu, hw in sorted(doc["hardware"].items()):
        for model, per_tp in sorted(hw["non_attention_s"].items()):
            for tp, curve in sorted(per_tp.items(), key=lambda kv: int(kv[0])):
                rows.append(_row(gpu, "non-attention layer", f"{model} tp{tp}", curve))
        for tp, curve in sorted(hw["all_reduce_s"].items(), key=lambda kv: int(kv[0])):
            rows.append(_row(gpu, "all-reduce", f"{tp} GPUs", curve))
        for link, curve in sorted(hw["send_recv_s"].items()):
            rows.append(_row(gpu, "send/recv", link, curve))
    return rows


def _row(gpu: str, quantity: str, case: str, curve: dict) -> dict:
    return {"gpu": gpu, "quantity": quantity, "case": case, "rows": curve.get("rows", 0), "knots": len(curve["x"]),
            "median_rel_err": curve.get("median_rel_err"), "p90_rel_err": curve.get("p90_rel_err"),
            "max_rel_err": curve.get("max_rel_err")}


def format_table(doc: dict) -> str:
    lines = [f"{'hardware':<15}{'quantity':<21}{'case':<17}{'rows':>5}{'knots':>6}{'median err':>11}"
             f"{'p90 err':>9}{'max err':>9}"]
    lines.append("-" * len(lines[0]))
    pct = lambda v: "-" if v is None else f"{100 * v:.1f}%"  # noqa: E731
    for r in fit_error_rows(doc):
        lines.append(f"{r['gpu']:<15}{r['quantity']:<21}{r['case']:<17}{r['rows']:>5}{r['knots']:>6}"
                     f"{pct(r['median_rel_err']):>11}{pct(r['p90_rel_err']):>9}{pct(r['max_rel_err']):>9}")
    for gpu, hw in sorted(doc["hardware"].items()):
        att = hw["attention"]
        line = f"{gpu}: attention KV read {att['kv_read_bytes_per_s'] / 1e9:.1f} GB/s"
        if "hbm_bytes_per_s" in hw:
            line += f" ({100 * att['kv_read_bytes_per_s'] / hw['hbm_bytes_per_s']:.0f}% of HBM peak)"
        if att.get("prefill_attn_flops_per_s"):
            line += f", prefill attention {att['prefill_attn_flops_per_s'] / 1e12:.2f} TFLOP/s"
        if hw.get("memcpy_bytes_per_s"):
            line += f", memcpy {hw['memcpy_bytes_per_s'] / 1e9:.1f} GB/s"
        lines.append(line + f"  [{att.get('source', 'measured')}]")
    return "\n".join(lines)
