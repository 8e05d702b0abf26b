"""The experiments and benchmarks that run on the Ray backend, on a private 2-CPU Ray: `e2e --quick`, `repro bench
ray`, sim-vs-real's pooled arm, the step overhead fitted to the Ray engine's own steps, and the co-run measurement."""
import json

import pytest

ray = pytest.importorskip("ray")

from click.testing import CliRunner  # noqa: E402

from reference_impl.backends.ray import RayConfig  # noqa: E402
from reference_impl.model.llama import TINY, random_model  # noqa: E402
from repro.cli import cli  # noqa: E402

pytestmark = [pytest.mark.xdist_group("ray"), pytest.mark.usefixtures("local_ray")]

MODEL = random_model(TINY, seed=3)


def test_e2e_quick_on_ray_validates_against_the_schema(tmp_path):
    from repro.framework.base import RunParams
    from repro.framework.registry import get_experiment
    from repro.results import load_results, run_and_save

    exp = get_experiment("e2e")
    # the trace's 70th percentile fills an instance: 3 of these 6 requests outgrow one
    extra = {"requests": "6", "instance_tokens": "64", "long_quantile": "0.7",
             "cpus_per_instance": "0.5"}  # two warm engines on the module's 2 CPUs
    path, ran = run_and_save(exp, RunParams(quick=True, backend="ray", extra=extra), tmp_path, log=lambda line: None)
    assert ran and path.exists()
    (result,) = load_results(tmp_path, exp)  # validated against serving.schema.json on load
    data = result["data"]
    (group,) = data["groups"]
    assert group["trace_id"] == 1 and group["num_instances"] == 2 and group["long_quantile"] == 0.7
    assert len(group["rates_per_s"]) >= 6  # a curve: light load to past saturation
    for system in ("infinite-llm", "vllm-m"):
        points = [p for p in group["points"] if p["system"] == system]
        assert sorted(p["rate_per_s"] for p in points) == sorted(set(p["rate_per_s"] for p in points))
        assert set(group["rates_per_s"]) <= {p["rate_per_s"] for p in points}
        for p in points:
            assert p["loadavg_1m"] >= 0 and p["engine"]["num_steps"] and p["steady_output_tok_s"] > 0
            if system == "infinite-llm":  # pooled KV serves what outgrows an instance
                assert p["num_finished"] == 6 and p["num_rejected"] == 0
            else:  # vLLM-M rejects it
                assert p["num_rejected"] >= 1 and p["num_finished"] + p["num_rejected"] == 6
    assert group["max_tput_ratio"] > 0 and set(group["plateau"]) == {"infinite-llm", "vllm-m"}
    assert data["link"].startswith("torch.distributed") and data["machine"]["loadavg_1m_max"] >= 0


def test_bench_ray_device_time_scaling_and_pooled_runs(tmp_path):
    """`repro bench ray` with the device-time model: per run the fields of the scaling table, tokens equal to a
    local run (the command fails otherwise), N independent engines beside pooling-off runs, and with pooling on
    the debtors' KV spread (blocks moved or borrowed) with their own step and wait times."""
    out = tmp_path / "scaling.json"
    base = ["bench", "ray", "--model", "device-time:2ms", "--requests-per-instance", "2", "--max-new-tokens", "6",
            "--prompt-len", "8", "--block-size", "4", "--repeats", "1"]
    result = CliRunner().invoke(cli, base + ["--instances", "1,2", "--out", str(out)])
    assert result.exit_code == 0, result.output
    rows = json.loads(out.read_text())
    assert [r["num_instances"] for r in rows] == [1, 2] and all(r["pooling"] == "off" for r in rows)
    for r in rows:
        assert r["tok_s"] > 0 and r["independent_tok_s"] > 0 and r["step_ms"] >= 2.0
        assert {"control_ms", "wait_ms", "messaging_ms", "compute_ms", "load_before"} <= set(r)
    result = CliRunner().invoke(cli, base + ["--instances", "2", "--pooling", "on", "--out", str(out)])
    assert result.exit_code == 0, result.output
    (pooled,) = json.loads(out.read_text())
    assert pooled["independent_tok_s"] is None and pooled["debtor_step_ms"] > 0 and pooled["creditor_step_ms"] > 0
    assert pooled["debtor_wait_ms"] > 0  # every debtor step waited for its creditor's MicroAttention
    # a waiting peer call in the one measured repeat depends on timing (the loaded suite once saw none; the spread
    # itself is the debtor's wait above); the counters agree with each other either way
    calls, call_ms = pooled["peer_calls_per_step"], pooled["peer_call_ms"]
    assert (call_ms is None) if calls == 0 else (calls > 0 and call_ms > 0)


def test_sim_vs_real_pooled_arm_measures_and_predicts_both_systems(tmp_path):
    """sim-vs-real's pooled arm on the module's Ray: both systems on 2 instances, measured and simulated, with the
    gloo link measured into the calibration the simulator reads."""
    from repro.framework.base import RunParams
    from repro.framework.registry import get_experiment
    from repro.results import load_results, run_and_save

    exp = get_experiment("sim-vs-real")
    extra = {"num_requests": "4", "max_tokens": "24", "rates": "30", "max_batch_size": "4", "vllm": "off",
             "pooled_requests": "6", "pooled_rates": "4", "instance_tokens": "64", "long_quantile": "0.7", "lamina": "off"}
    path, ran = run_and_save(exp, RunParams(quick=True, extra=extra), tmp_path, log=lambda line: None)
    assert ran
    (result,) = load_results(tmp_path, exp)  # validated against sim_vs_real.schema.json on load
    data = result["data"]
    assert data["pooled"].startswith("ran") and "pooled_arm" in data
    arm = data["pooled_arm"]
    assert {(p["system"], p["pooling"], p["num_instances"]) for p in arm["points"]} == {
        ("infinite-llm", True, 2), ("vllm-m", False, 2)}
    assert len(arm["calibrations"]) == 2  # the engines' gManagers', then the rate's (the simulator's)
    assert all(t > 0 for c in arm["calibrations"] for t in c["link_one_way_s"].values())
    costs = arm["calibrations"][1]  # the Ray engine's, measured in Infinite-LLM's saturation run
    assert costs["served_step_s"] > 0 and costs["served_cpu_s"] > 0 and costs["peer_call_s"] >= 0
    co_run = arm["co_run"]  # a step's CPU time beside the others over alone, times a loop's wall over CPU time
    assert costs["co_run_slowdown"] == pytest.approx(co_run["cpu_ratio"] * co_run["core_share_stretch"])
    assert costs["co_run_slowdown"] == co_run["co_run_slowdown_simulated"]
    assert len(co_run["alone_ms"]) == len(co_run["together_ms"]) == len(co_run["alone_cpu_ms"]) == 2
    assert co_run["core_share_stretch"] >= 1.0  # a compute phase takes at least its CPU time on the wall clock
    assert costs["step_overhead_source"].startswith("Ray engine steps")  # the engine that serves, not the local one
    for run in arm["runs"]:
        for side in ("measured", "predicted"):
            done = run[side]["num_finished"] + run[side]["num_rejected"]
            assert done == 6 and run[side]["output_tok_s"] > 0
            if run["system"] == "infinite-llm":  # pooled KV holds the 3 requests that outgrow an instance
                assert run[side]["num_rejected"] == 0
            else:
                assert run[side]["num_rejected"] == 3
    il = next(r for r in arm["runs"] if r["system"] == "infinite-llm")
    assert il["engine"]["num_served"] > 0  # a creditor served remote MicroAttention for real
    assert arm["measured_max_tput_ratio"] > 0 and arm["predicted_max_tput_ratio"] > 0


def test_sim_vs_real_lamina_arm_serves_lamina_on_a_compute_and_a_memory_instance(tmp_path):
    """sim-vs-real's Lamina arm on the module's Ray: Lamina's compute instance runs every step (the memory instance
    none of its own), Infinite-LLM's two both step, every request finishes on both sides, and the simulated Lamina
    prices every layer's round trip on the link, measured."""
    from repro.framework.base import RunParams
    from repro.framework.registry import get_experiment
    from repro.results import load_results, run_and_save

    exp = get_experiment("sim-vs-real")
    extra = {"num_requests": "4", "max_tokens": "24", "rates": "30", "max_batch_size": "4", "vllm": "off",
             "pooled": "off", "lamina_rates": "20"}
    run_and_save(exp, RunParams(quick=True, extra=extra), tmp_path, log=lambda line: None)
    (result,) = load_results(tmp_path, exp)  # validated against sim_vs_real.schema.json on load
    arm = result["data"]["lamina_arm"]
    assert result["data"]["lamina"].startswith("ran")
    assert {p["system"] for p in arm["points"]} == {"lamina", "infinite-llm"}
    for run in arm["runs"]:
        for side in ("measured", "predicted"):
            assert run[side]["num_finished"] == 4 and run[side]["output_tok_s"] > 0
        steps = run["measured"]["num_steps"]
        assert (steps["1"] == 0) == (run["system"] == "lamina") and steps["0"] > 0
    lamina = next(r for r in arm["runs"] if r["system"] == "lamina")
    assert lamina["engine"]["messaging_ms"] > 0 and arm["message_latency_per_step_s"] > 0
    assert arm["pipelining"]["pipelined_tok_s_over_predicted"] >= 1.0  # the pipeline never lengthens a step
    assert set(arm["ranking"]["same"]) == {"output_tok_s", "mean_ttft_s"}
    # calibrated as the pooled arm is: the Ray engine's own steps, then, on every rate's, the engine costs measured
    # in the saturation runs (Lamina's memory instance served its compute instance's attention)
    first, costs = arm["calibrations"]
    assert first["step_overhead_source"].startswith("Ray engine steps") and "co_run_slowdown" not in first
    assert costs["co_run_slowdown"] == arm["co_run"]["co_run_slowdown_simulated"] > 0
    assert costs["co_run_slowdown"] == pytest.approx(arm["co_run"]["cpu_ratio"] * arm["co_run"]["core_share_stretch"])
    assert arm["saturation"]["lamina"]["engine"]["num_served"] > 0 and costs["served_step_s"] > 0


def test_the_ray_engines_steps_calibrate_the_step_overhead(tmp_path):
    """The pooled arm's step overhead comes from the Ray engine's own steps (one instance, closed loop): a decode
    and a prefill step per batch and repeat, in the loop's CPU time, fitted over the op-level layer terms."""
    from reference_impl.calibration.model import CalibratedPerfModel
    from reference_impl.calibration.perf_model import InstanceLoad, step_time_s
    from repro.experiments.sim_vs_real.calibration import add_ray_steps
    from repro.experiments.sim_vs_real.ray_steps import RaySteps

    steps = RaySteps(MODEL, RayConfig(), max_batch=3, prompt_len=6, decode=3, block_size=4)
    try:
        decode, prefill = steps.measure((1, 3), repeats=2)
    finally:
        steps.close()
    assert [s.batch_size for s in decode] == [s.num_prompts for s in prefill] == [1, 3, 1, 3]
    # the three decode steps hold 7, 8 and 9 tokens of KV a request: 2, 2 and 3 blocks of 4
    assert [s.kv_tokens for s in decode] == [int(b * 4 * 7 / 3) for b in (1, 3, 1, 3)]
    assert all(0 < s.step_s < 1.0 for s in decode + prefill)
    tiny = {"x": [1, 4096], "y": [1e-7, 4096e-7]}  # op-level layer terms far below the engine's steps
    path = tmp_path / "cpu.json"
    path.write_text(json.dumps({
        "format": "infinite-llm-repro/calibration/1", "profile": {"model": "llama-tiny"},
        "hardware": {"cpu": {"dtype_bytes": 4, "mem_bytes": 1e10, "gpus_per_node": 1,
                             "non_attention_s": {"llama-tiny": {"1": tiny}}, "all_reduce_s": {},
                             "send_recv_s": {"intra-node": {"x": [4096], "y": [1e-6]}},
                             "attention": {"kv_read_bytes_per_s": 1e15, "prefill_attn_flops_per_s": 1e15,
                                           "derivation": "by hand"}}}}))
    add_ray_steps(path, "llama-tiny", (decode, prefill))
    fitted = json.loads(path.read_text())["hardware"]["cpu"]
    assert "Ray engine" in fitted["step_overhead_s"]["llama-tiny"]["derivation"]
    assert fitted["attention"]["kv_read_bytes_per_s"] == 1e15  # one context per batch: the op-level rate is kept
    model = CalibratedPerfModel.for_setting(model="llama-tiny", gpu="cpu", link="intra-node", coefficients_path=path)
    for b in (1, 3):  # the model's decode step is what the engine's took (the mean of the two repeats)
        measured_s = [s.step_s for s in decode if s.batch_size == b]
        assert step_time_s(model, InstanceLoad(b, 9 * b)) == pytest.approx(sum(measured_s) / 2, rel=0.05)


def test_a_device_time_step_computes_as_long_beside_the_other_instances():
    """co_run_slowdown measures how much the instances slow each other's compute by sharing cores; a step that
    sleeps its device time (no CPU) shares nothing, so alone and together take the same time."""
    from reference_impl.backends.ray import RayConfig
    from reference_impl.model.device_time import DeviceTimeModel
    from repro.experiments.sim_vs_real.co_run import measure_co_run

    model = DeviceTimeModel(0.01)
    co_run = measure_co_run(model, RayConfig(), 2, batch=2, prompt_len=4, max_new_tokens=8,
                            block_size=4, rounds=1)
    assert co_run.alone_ms[0] >= 10.0 and co_run.together_ms[0] >= 10.0  # each step sleeps its 10 ms
    assert 0.8 < co_run.co_run_slowdown < 1.3


