"""`repro bench serve` against our own server on a tiny trace: the serving-point records (valid against the
serving schema), and latency reports whose token counts agree with the server's own counters."""
import json
from pathlib import Path

import httpx
import jsonschema

SCHEMA = Path(__file__).resolve().parents[2] / "repro" / "schemas" / "serving.schema.json"


def _not_strict_json(constant):
    raise ValueError(f"{constant} is not strict JSON")


def test_bench_serve_on_our_server(start_server, repro_cli, tmp_path):
    server = start_server(num_instances=2, blocks_per_instance=16, block_size=16)
    out = tmp_path / "bench.json"
    code, stdout, err = repro_cli(["bench", "serve", "--base-url", server.base_url, "--requests", "8",
                                   "--rates", "8,inf", "--slo-ttft-ms", "60000", "--out", str(out)])
    assert code == 0, err
    result = json.loads(out.read_text(), parse_constant=_not_strict_json)  # no Infinity/NaN anywhere
    group = result["groups"][0]
    assert group["rates_per_s"] == [8.0, "inf"] and [p["rate_per_s"] for p in group["points"]] == [8.0, "inf"]
    assert result["model"] == "tiny" and result["max_model_len"] == 512 and group["trace_id"] == 1
    schema = json.loads(SCHEMA.read_text())
    for p in group["points"]:
        jsonschema.validate(p, {**schema["$defs"]["point"], "$defs": schema["$defs"]})
        assert p["num_finished"] == p["num_requests"] == 8 and p["system"] == "infinite-llm"
    reports = result["reports"]
    assert [r["rate_per_s"] for r in reports] == [8.0, "inf"]
    for r in reports:
        assert r["num_errors"] == 0 and r["good_fraction"] == 1.0  # a generous SLO: every request is good
        assert r["ttft_ms"]["p50"] <= r["e2e_ms"]["p50"] and r["ttft_ms"]["p50"] <= r["ttft_ms"]["p99"]
        assert r["output_tok_s"] > 0 and r["goodput_req_s"] > 0
    # what the client counted is what the server generated (its own counter, read independently)
    metrics = httpx.get(server.base_url + "/metrics").text
    generated = next(float(line.split()[-1]) for line in metrics.splitlines()
                     if line.startswith("vllm:generation_tokens_total{"))
    client_tokens = sum(p["output_tok_s"] * p["makespan_s"] for p in group["points"])
    assert abs(client_tokens - generated) < 1e-6 * generated + 1
    assert "TTFT ms" in stdout and "goodput" in stdout


def test_bench_serve_unreachable_is_one_line(repro_cli):
    code, _, err = repro_cli(["bench", "serve", "--base-url", "http://127.0.0.1:1", "--rates", "1"])
    assert code == 2 and "GET /v1/models failed" in err and len(err.strip().splitlines()) == 1


def test_serve_plot_of_a_record_beside_itself(repro_cli, tmp_path):
    record = {"base_url": "http://x", "groups": [{"trace_id": 1, "model": "tiny", "max_tput_tok_s": {"vllm-s": [90.0]},
                                                  "points": [{"system": "vllm-s", "rate_per_s": r, "seed": 0,
                                                              "steady_output_tok_s": v}
                                                             for r, v in ((2.0, 40.0), ("inf", 90.0))]}],
              "reports": [{"rate_per_s": r, "seed": 0, "ttft_ms": {"p50": t}, "tpot_ms": {"p50": 2.0}}
                          for r, t in ((2.0, 10.0), ("inf", 30.0))]}
    path = tmp_path / "r.json"
    path.write_text(json.dumps(record, allow_nan=False))
    code, out, err = repro_cli(["bench", "serve-plot", str(path), str(path), "--figures-dir", str(tmp_path)])
    assert code == 0, err
    assert (tmp_path / "serve-http.png").is_file() and "90.0 / 90.0 tok/s = 1.00x" in out
    assert "TTFT p50 (ms) vllm-s / vllm-s: 2/s 1.00x, burst 1.00x" in out
