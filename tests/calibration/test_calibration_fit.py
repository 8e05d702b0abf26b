"""Fitting: the committed coefficients regenerate byte for byte, the fits reproduce the profile rows,
and a synthetic profiles folder comes back with the values it was built from."""
import copy
import csv
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from reference_impl.calibration import coefficients
from reference_impl.calibration.coefficients import DEFAULT_PATH, dumps, validate
from reference_impl.calibration.curve import Curve
from reference_impl.calibration.fit import REGENERATE, calibrate, datasheet_drift
from reference_impl.calibration.readers import NON_ATTENTION_OPS
from reference_impl.errors import InputError

SHARED = Path(__file__).resolve().parents[3] / "shared" / "data"
PROFILES = SHARED / "profiles"
needs_shared = pytest.mark.skipif(not PROFILES.is_dir(), reason="../shared/data/profiles is absent")

SYNTH_KV_RATE = 1.25e12  # bytes/s the synthetic DistServe slope encodes
OPT13B_KV_BYTES = 2 * 2 * 5120 * 40
OPS_COLUMNS = [f"time_stats.{op}.median" for op in NON_ATTENTION_OPS]


def synth_layer_ms(tokens: int, tp: int) -> float:
    return (0.3 + 0.002 * max(tokens - 64, 0)) / tp


def _write_csv(path: Path, header: list[str], rows: list[list]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)


def make_profiles(root: Path) -> Path:
    """A tiny A100 profiles folder in the layout of data/profiles, from known functions."""
    tokens = [1, 2, 4, 8, 16, 32, 64, 96, 128, 256, 512, 1024, 2048, 4096]
    header = OPS_COLUMNS + ["n_head", "n_kv_head", "n_embd", "n_expanded_embd", "num_tokens",
                            "num_tensor_parallel_workers"]
    rows = [[synth_layer_ms(n, tp) / len(OPS_COLUMNS)] * len(OPS_COLUMNS) + [32, 32, 4096, 11008, n, tp]
            for tp in (1, 2) for n in tokens]
    _write_csv(root / "vidur/compute/a100/meta-llama/Llama-2-7b-hf/mlp.csv", header, rows)
    sizes = [2048 * 4 ** k for k in range(9)]
    for kind, groups in (("all_reduce", [(2, 2), (4, 4)]), ("send_recv", [(2, 1), (2, 2)])):
        rows = [[0.01 + size / (50e6 * per_node), workers, per_node, size]  # ms: latency + bytes / bandwidth
                for workers, per_node in groups for size in sizes]
        _write_csv(root / f"vidur/network/a100_dgx/{kind}.csv",
                   [f"time_stats.{kind}.median", "num_workers", "devices_per_node", "size"], rows)
    slope_ms = OPT13B_KV_BYTES / SYNTH_KV_RATE * 1e3
    fits = {"facebook/opt-13b": {"1": {"decoding_smallbs": [10.0, slope_ms, 0.05], "prefill": [10.0, 0.1, 1e-5]}}}
    (root / "distserve").mkdir(parents=True)
    (root / "distserve/profiler-a100-80g.distserve.json").write_text(json.dumps(fits))
    return root


@needs_shared
def test_committed_coefficients_are_what_calibrate_produces():
    assert dumps(calibrate(PROFILES)) == DEFAULT_PATH.read_text()


def _vidur_rows(path: Path) -> dict[int, tuple[list[int], list[float]]]:
    per_tp: dict[int, tuple[list[int], list[float]]] = {}
    with path.open() as f:
        for row in csv.DictReader(f):
            tokens, times = per_tp.setdefault(int(row["num_tensor_parallel_workers"]), ([], []))
            tokens.append(int(row["num_tokens"]))
            times.append(sum(float(row[c]) for c in OPS_COLUMNS) * 1e-3)
    return per_tp


@needs_shared
@pytest.mark.parametrize("model,csv_path", [
    ("llama2-7b", "meta-llama/Llama-2-7b-hf"), ("llama2-13b", "internlm/internlm-20b"),
    ("llama2-70b", "meta-llama/Llama-2-70b-hf")])
def test_non_attention_fit_reproduces_every_a100_row_within_5_percent(model, csv_path):
    fits = json.loads(DEFAULT_PATH.read_text())["hardware"]["A100-80GB-SXM"]["non_attention_s"][model]
    for tp, (tokens, times) in _vidur_rows(PROFILES / "vidur/compute/a100" / csv_path / "mlp.csv").items():
        curve = Curve.from_json(fits[str(tp)])
        err = np.abs(np.array([curve(n) for n in tokens]) - times) / np.array(times)
        assert err.max() <= 0.051, (model, tp, err.max())
        assert np.median(err) <= 0.015, (model, tp, np.median(err))


@needs_shared
def test_network_fits_follow_the_rows_and_attention_rate_matches_the_anchor():
    doc = json.loads(DEFAULT_PATH.read_text())
    a100 = doc["hardware"]["A100-80GB-SXM"]
    for curve in [*a100["all_reduce_s"].values(), *a100["send_recv_s"].values()]:
        # small all-reduces are bimodal in the rows (~20 us or ~60 us at the same size): one curve misses a mode
        assert curve["median_rel_err"] <= 0.03 and curve["p90_rel_err"] <= 0.20
    anchors = json.loads((SHARED / "paper/hardware_and_models.json").read_text())["measured_efficiency_anchors"]
    low, high = anchors["a100_decode_attention_kv_read_tb_s"]["value"]
    assert low * 1e12 <= a100["attention"]["kv_read_bytes_per_s"] <= high * 1e12
    inter = a100["send_recv_s"]["inter-node"]
    assert inter["x"][-1] / inter["y"][-1] / 1e9 == pytest.approx(
        anchors["a100_nccl_send_recv_gb_s"]["inter_node_vidur_dgx"], rel=0.05)


def test_synthetic_profiles_come_back_as_built(tmp_path):
    doc = validate(calibrate(make_profiles(tmp_path)), "synthetic")
    a100 = doc["hardware"]["A100-80GB-SXM"]
    assert a100["attention"]["kv_read_bytes_per_s"] == pytest.approx(SYNTH_KV_RATE, rel=1e-5)
    assert "H100-SXM" not in doc["hardware"]
    for tp in (1, 2):
        entry = a100["non_attention_s"]["llama2-7b"][str(tp)]
        assert entry["max_rel_err"] <= 0.05
        assert entry["y"][0] == pytest.approx(synth_layer_ms(1, tp) * 1e-3, rel=1e-5)
    for curve in [*a100["all_reduce_s"].values(), *a100["send_recv_s"].values()]:
        assert curve["max_rel_err"] < 1e-5  # a straight line is reproduced exactly between bin medians
    assert sorted(a100["all_reduce_s"]) == ["2", "4"] and sorted(a100["send_recv_s"]) == ["inter-node", "intra-node"]
    assert dumps(doc) == dumps(calibrate(tmp_path))


def test_the_committed_calibration_holds_what_specs_json_gives_today():
    """Without the profiles (a clean clone): every value `repro calibrate` takes or derives from specs.json (memory,
    HBM rate, node shape, the published prefill attention rate, the H100's attention scaled from the A100's) is
    what specs.json gives now; an edited specs.json fails here until the calibration is regenerated."""
    drift = datasheet_drift(coefficients.load())
    assert not drift, ("specs.json changed since reference_impl/calibration/data/vidur_distserve.json was fitted; "
                       f"regenerate it with `{REGENERATE}` (then `make bless` if simulated numbers move):\n"
                       + "\n".join(drift))


def test_datasheet_drift_agrees_with_calibrate_and_names_a_stale_value(tmp_path):
    root = make_profiles(tmp_path)
    shutil.copytree(root / "vidur/compute/a100", root / "vidur/compute/h100")  # an H100 without a decode profile
    shutil.copytree(root / "vidur/network/a100_dgx", root / "vidur/network/h100_dgx")
    doc = calibrate(root)
    assert "H100-SXM" in doc["hardware"] and datasheet_drift(doc) == []
    for gpu, key in (("A100-80GB-SXM", "prefill_attn_flops_per_s"), ("H100-SXM", "kv_read_bytes_per_s")):
        stale = copy.deepcopy(doc)
        stale["hardware"][gpu]["attention"][key] *= 1.1
        assert [line.split(":")[0] for line in datasheet_drift(stale)] == [f"{gpu} attention {key}"]
    stale = copy.deepcopy(doc)
    stale["hardware"]["A100-80GB-SXM"]["hbm_bytes_per_s"] *= 0.9
    assert [line.split(":")[0] for line in datasheet_drift(stale)] == ["A100-80GB-SXM hbm_bytes_per_s"]


def test_bad_profile_folders_raise_one_line_input_errors(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        calibrate(tmp_path / "nowhere")
    with pytest.raises(InputError, match="no Vidur compute profiles"):
        calibrate(tmp_path)
    root = make_profiles(tmp_path / "p")
    mlp = root / "vidur/compute/a100/meta-llama/Llama-2-7b-hf/mlp.csv"
    text = mlp.read_text()
    mlp.write_text(text.replace("time_stats.add.median", "time_stats.add.mean"))
    with pytest.raises(InputError, match="lacks the columns time_stats.add.median") as info:
        calibrate(root)
    assert "\n" not in str(info.value)
    mlp.write_text(text.replace(",32,32,4096,", ",32,32,4000,"))
    with pytest.raises(InputError, match="layer dims"):
        calibrate(root)
    mlp.write_text(text)
    (root / "distserve/profiler-a100-80g.distserve.json").write_text("{\"facebook/opt-13b\": 3}")
    with pytest.raises(InputError, match="not a DistServe profile"):
        calibrate(root)
