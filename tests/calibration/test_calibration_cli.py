"""`repro calibrate` and `repro profile`: files written atomically, bad input is one line and exit 2."""
import json

import pytest

from reference_impl.calibration import CalibratedPerfModel
from reference_impl.calibration.coefficients import validate
from reference_impl.calibration.perf_model import InstanceLoad
from repro.cli import main
from test_calibration_fit import make_profiles


def run_failing(argv, capsys) -> str:
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and "Traceback" not in err
    return err


def test_calibrate_writes_the_coefficients_and_prints_the_fit_error(tmp_path, capsys):
    out = tmp_path / "coeff.json"
    main(["calibrate", "--profiles", str(make_profiles(tmp_path / "p")), "--out", str(out)])
    printed = capsys.readouterr().out
    assert "llama2-7b tp1" in printed and "max err" in printed and "attention KV read 1250.0 GB/s" in printed
    validate(json.loads(out.read_text()), str(out))
    model = CalibratedPerfModel.for_setting(model="llama2-7b", gpu="A100-80GB-SXM", tp=2, coefficients_path=out)
    assert model.layer_time_s(InstanceLoad(16, 1000)) > 0
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temp file left


def test_calibrate_bad_input_leaves_no_output(tmp_path, capsys):
    out = tmp_path / "coeff.json"
    assert "does not exist" in run_failing(["calibrate", "--profiles", str(tmp_path / "nope"), "--out", str(out)],
                                           capsys)
    root = make_profiles(tmp_path / "p")
    send_recv = root / "vidur/network/a100_dgx/send_recv.csv"
    send_recv.write_text(send_recv.read_text().replace("devices_per_node", "nodes"))
    out.write_text("previous")
    err = run_failing(["calibrate", "--profiles", str(root), "--out", str(out)], capsys)
    assert "send_recv.csv lacks the columns devices_per_node" in err
    assert out.read_text() == "previous"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["coeff.json", "p"]


def test_profile_quick_measures_this_machine_in_the_same_format(tmp_path, capsys):
    out = tmp_path / "cpu.json"
    main(["profile", "--quick", "--threads", "1", "--device", "cpu", "--out", str(out)])
    assert "llama-tiny tp1" in capsys.readouterr().out
    doc = validate(json.loads(out.read_text()), str(out))
    cpu = doc["hardware"]["cpu"]
    assert cpu["dtype_bytes"] == 4 and cpu["attention"]["kv_read_bytes_per_s"] > 0
    model = CalibratedPerfModel.for_setting(model="llama-tiny", gpu="cpu", coefficients_path=out)
    assert model.link.name == "intra-node"
    short, long = (model.layer_time_s(InstanceLoad(4, kv)) for kv in (1_000, 100_000))
    assert 0 < short < long
    assert model.memory.kv_capacity_tokens > 0


def test_profile_bad_input(tmp_path, capsys):
    out = tmp_path / "cpu.json"
    assert "unknown model 'gpt-5'" in run_failing(["profile", "--quick", "--model", "gpt-5", "--out", str(out)],
                                                  capsys)
    assert "cannot use device" in run_failing(["profile", "--quick", "--device", "tpu:0", "--out", str(out)], capsys)
    assert "does not exist" in run_failing(["profile", "--quick", "--out", str(tmp_path / "no/dir/x.json")], capsys)
    assert not out.exists()
