"""`repro simulate`: both rates named and equal to the simulator's own summary, latency percentiles, goodput under
the stated SLO counted by hand, the design's counters, and `--knob` checked against the design's own knobs."""
import json

import pytest

from reference_impl import cluster, simulate, system_config
from reference_impl.serving.records import FINISHED, tpot_s
from workloads import SourceOptions, generate, save_jsonl


@pytest.fixture(scope="module")
def requests():
    return generate(trace_id=0, num_requests=40, rate_per_s=8.0, seed=1, options=SourceOptions(source="fitted"))


@pytest.fixture
def workload_file(tmp_path, requests):
    path = tmp_path / "w.jsonl"
    save_jsonl(path, requests)
    return str(path)


def run_json(repro_cli, argv) -> dict:
    code, out, err = repro_cli(["simulate", *argv, "--json"])
    assert code == 0, err
    return json.loads(out)


def test_rates_and_latencies_are_the_simulators_own(repro_cli, workload_file, requests):
    got = run_json(repro_cli, ["--workload", workload_file, "--system", "vllm-m", "--gpus", "2"])
    ref = simulate(system_config("vllm-m", cluster("llama2-7b", "A100-80GB-SXM", 2)), requests)
    s = ref.summary()
    assert got["summary"]["steady_output_tok_s"] == pytest.approx(s.steady_output_tok_s)
    assert got["summary"]["output_tok_s"] == pytest.approx(s.output_tok_s)
    assert got["summary"]["p50_ttft_ms"] <= got["summary"]["p99_ttft_ms"]
    assert got["summary"]["p50_tpot_ms"] <= got["summary"]["p99_tpot_ms"]
    met = sum(r.status == FINISHED and r.first_token_s - r.arrival_s <= 0.25 and (tpot_s(r) or 0) <= 0.1
              for r in ref.requests)
    assert got["slo"]["attainment"] == pytest.approx(met / len(requests))
    assert got["slo"]["goodput_req_s"] == pytest.approx(met / s.makespan_s)


def test_text_names_each_rate(repro_cli, workload_file):
    code, out, _ = repro_cli(["simulate", "--workload", workload_file, "--gpus", "2", "--slo-ttft-ms", "1000"])
    assert code == 0
    assert "steady state" in out and "makespan" in out and "TTFT ms: p50" in out and "TPOT ms: p50" in out
    assert "SLO TTFT <= 1000 ms and TPOT <= 100 ms" in out and "goodput" in out


def test_knobs_reach_the_design_and_its_choices_are_printed(repro_cli, workload_file):
    lamina = run_json(repro_cli, ["--workload", workload_file, "--system", "lamina", "--gpus", "2",
                                  "--knob", "memory_devices=2"])
    assert lamina["configuration"]["memory_devices_per_instance"] == 2
    assert lamina["design_counters"]  # Lamina counts its KV moves and pools
    pd = run_json(repro_cli, ["--workload", workload_file, "--system", "pd-disaggregation", "--gpus", "4",
                              "--knob", "num_prefill=1"])
    assert pd["configuration"]["split"].startswith("1x ") and pd["configuration"]["num_gpus"] == 4
    assert pd["design_counters"]["num_prefill_instances"] == 1
    code, out, _ = repro_cli(["simulate", "--workload", workload_file, "--system", "loongserve", "--gpus", "4",
                              "--knob", "max_degree=2"])
    assert code == 0 and "ring degree: up to 2 instances" in out


@pytest.mark.parametrize("system, knob, expected", [
    ("lamina", "bogus=1", "--knob bogus: not a knob of lamina; its knobs: memory_devices, micro_batches"),
    ("lamina", "memory_devices=x", "--knob memory_devices: got 'x', expected int or none"),
    ("lamina", "memory_devices=0", "at least one memory device"),
    ("infinite-llm", "a=1", "infinite-llm has no knobs of its own"),
    ("llumnix", "enable_migration", "give NAME=VALUE"),
])
def test_a_wrong_knob_is_one_line(repro_cli, workload_file, system, knob, expected):
    code, out, err = repro_cli(["simulate", "--workload", workload_file, "--system", system, "--knob", knob])
    assert code not in (0, None) and out == ""
    assert err.startswith("error: ") and err.count("\n") == 1 and expected in err, err
