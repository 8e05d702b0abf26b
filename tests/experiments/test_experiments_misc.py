"""kv-move (and the other small experiments): modelled arithmetic, quick runs through the result machinery."""
import pytest

from reference_impl.calibration import CalibratedPerfModel
from reference_impl.errors import InputError
from reference_impl.calibration.perf_model import InstanceLoad, step_time_s
from repro.framework.base import RunParams
from repro.framework.registry import get_experiment
from repro.results import load_results, run_and_save


def _quick(name, tmp_path, backend="sim", **extra):
    exp = get_experiment(name)
    run_and_save(exp, RunParams(quick=True, backend=backend, extra=extra), tmp_path, log=lambda m: None)
    results = load_results(tmp_path, exp)
    return exp, results, results[0]["data"]


def test_kv_move_model_is_max_of_compute_and_transfer():
    from repro.experiments.kv_move import modelled
    rows = modelled(batch_size=64, context_len=1000)
    slow = CalibratedPerfModel.for_setting(model="llama2-7b", gpu="A100-80GB-SXM", link="0.125")
    compute = step_time_s(slow, InstanceLoad(64, 64_000))
    by = {(r["link"], r["move_tokens"]): r for r in rows}
    assert by[("0.125 GB/s", 0)]["step_ms"] == pytest.approx(compute * 1e3)
    kv_64 = 64 * 2 * 32 * 4096 * 2  # tokens x K,V x layers x hidden x fp16
    assert by[("0.125 GB/s", 64)]["step_ms"] == pytest.approx(max(compute, slow.link.time_s(kv_64)) * 1e3)
    for link in {r["link"] for r in rows}:
        thpt = [by[(link, t)]["throughput_tok_s"] for t in (0, 8, 16, 32, 64)]
        assert thpt == sorted(thpt, reverse=True)  # moving more never helps


def test_kv_move_quick_run_measures_every_setting(tmp_path):
    exp, results, data = _quick("kv-move", tmp_path, backend="local")
    assert [r["move_tokens"] for r in data["measured"]] == [0, 8, 16, 32, 64]
    assert all(r["step_ms"] > 0 and r["steps"] == 2 for r in data["measured"])
    rows = exp.claims(results)
    assert {r.claim_id for r in rows} == {"kv-move-overhead"}
    thpt = {}
    for r in data["a100_model"]:
        thpt.setdefault(r["link"], {})[r["move_tokens"]] = r["throughput_tok_s"]
    model_rows = [r for r in rows if "A100 model" in r.metric]
    assert len(model_rows) == 2 * len(thpt)
    for row in model_rows:  # loss = 1 - throughput moving / not moving, by hand, never negative
        link, tokens = row.metric.rsplit(", ", 1)[1], int(row.metric.split(" at ")[1].split(" ")[0])
        assert row.reproduced == pytest.approx((1 - thpt[link][tokens] / thpt[link][0]) * 100, abs=0.01)
        assert 0 <= row.reproduced < 100
    loss = {(r.metric.rsplit(", ", 1)[1], r.metric.split(" at ")[1].split(" ")[0]): r.reproduced for r in model_rows}
    nvlink, slow = next(k for k in thpt if "intra" in k or "NVLink" in k), next(k for k in thpt if "0.125" in k)
    assert loss[(nvlink, "16")] == 0 and loss[(slow, "32")] > loss[(nvlink, "32")]
    assert exp.plot(results, str(tmp_path / "fig"))[0].endswith("infinite-llm-fig12.png")
    with pytest.raises(InputError):
        run_and_save(exp, RunParams(extra={"batch_size": "0"}), tmp_path, force=True, log=lambda m: None)


def test_remote_vs_local_quick_run_and_model_arithmetic(tmp_path):
    from repro.attention.cost_model import AttentionCostModel
    exp, results, data = _quick("remote-vs-local", tmp_path, backend="local")
    assert {(r["tokens"], r["method"]) for r in data["measured"]} == {
        (t, m) for t in (256, 1024) for m in ("remote compute", "local compute")}
    assert all(r["max_abs_diff"] < 1e-5 for r in data["measured"])  # same attention either way
    m = AttentionCostModel.for_model("llama2-13b", link="inter-node")
    by = {(r["tokens"], r["link"], r["method"]): r["time_us"] for r in data["a100_model"]}
    kv_bytes = 2 * 100_000 * 40 * 128 * 2
    local = by[(100_000, m.link.name, "local compute")]
    assert local == pytest.approx((m.link.time_s(kv_bytes) + m.kv_read_s(100_000, 40)) * 1e6)
    assert local > by[(100_000, m.link.name, "remote compute")]
    claims = exp.claims(results)
    model_claims = [r for r in claims if "A100" in r.metric]
    assert model_claims and all(r.reproduced > 1 for r in model_claims)  # computing where the KV is is faster
    for link in {r["link"] for r in data["a100_model"]}:  # and the gap grows with the context
        ratios = [r.reproduced for r in model_claims if f" {link}, " in r.metric]
        assert len(ratios) == 2 and ratios[1] >= ratios[0]
    (measured,) = [r for r in claims if "measured" in r.metric]
    assert 0 < measured.reproduced < float("inf")


def test_motivation_capacity_efficiency_and_utilisation_bounds(tmp_path):
    from repro.experiments.motivation import non_attention_efficiency
    exp, results, data = _quick("motivation", tmp_path)
    st = {(r["config"], r["context_len"]): r for r in data["static"]}
    one = CalibratedPerfModel.for_setting(model="llama2-7b", gpu="A100-80GB-SXM", tp=1)
    batch = min(256, one.memory.kv_capacity_tokens // 1000)
    assert st[("DP32TP1", 1000)]["batch_size"] == batch
    assert st[("DP32TP1", 1000)]["throughput_tok_s"] == pytest.approx(
        32 * batch / step_time_s(one, InstanceLoad(batch, batch * 1000)))
    assert st[("DP32TP1", 1_000_000)]["batch_size"] == 0  # a 1000K request does not fit one GPU
    assert st[("DP1TP32", 1_000_000)]["batch_size"] >= 1
    assert 0 < non_attention_efficiency(1) == pytest.approx(1.0)
    assert 0 < data["non_attention_efficiency_tp8"] < 1
    for r in data["utilisation"]:
        assert 0 < r["compute_util"] < 1 and 0 < r["memory_util"] < 1 and r["batch_size"] <= r["max_batch"]
    assert len(exp.plot(results, str(tmp_path / "fig"))) == 4
    assert {r.claim_id for r in exp.claims(results)} == {"obs1-static-tp", "obs2-utilization"}


@pytest.mark.parametrize("argv, message", [
    (["--experiment", "migration", "--param", "load_gb_s=fast"], "error: --param load_gb_s='fast' is not valid"),
    (["--experiment", "attention-micro", "--backend", "local", "--param", "contexts=100"],
     "error: context length 100 must be a positive multiple"),
    (["--experiment", "kv-move", "--param", "batch_size=0"], "error: --param batch_size="),
])
def test_bad_params_are_one_line_errors_and_write_nothing(tmp_path, capsys, argv, message):
    from repro.cli import main
    with pytest.raises(SystemExit) as exit_info:
        main(["run", *argv, "--results-dir", str(tmp_path)])
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error: ")]  # the run's log is on stderr too
    assert exit_info.value.code == 2 and len(errors) == 1 and errors[0].startswith(message) and "Traceback" not in err
    assert not any(tmp_path.rglob("*.json"))
