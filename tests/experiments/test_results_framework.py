"""`repro run / plot / report` machinery with a toy experiment: schema checks, atomic writes, skip/force."""
import json
import sys
import textwrap

import pytest
from click.testing import CliRunner

from reference_impl.errors import InputError
from repro.claims import headline_claims
from repro.framework import registry
from repro.framework.base import RunParams
from repro.report import build_report
from repro.results import load_results, result_path, run_and_save

TOY = textwrap.dedent('''
    from repro.framework.base import ClaimRow, Experiment, default_run_id
    from repro.framework.params import Param, boolean

    CALLS = []

    def run(params, log):
        CALLS.append(params)
        return {"value": "oops" if params.extra["bad"] else 2.5}

    def claims(results):
        return [ClaimRow("kv-move-overhead", "toy metric", "1-3x", 1.0, 3.0, results[0]["data"]["value"], "x")]

    EXPERIMENT = Experiment("toy", ("toy Fig 0",), "toy.schema.json", run, default_run_id, claims=claims,
                            params=(Param("bad", boolean, False, "return data that fails the schema"),))
''')
SCHEMA = {"type": "object", "required": ["value"], "properties": {"value": {"type": "number"}}}


@pytest.fixture
def toy(tmp_path, monkeypatch):
    (tmp_path / "toy_experiment.py").write_text(TOY)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(registry.EXPERIMENTS, "toy", "toy_experiment")
    import repro.results as results
    real = results.load_schema.__wrapped__
    monkeypatch.setattr(results, "load_schema", lambda name: SCHEMA if name == "toy.schema.json" else real(name))
    yield registry.get_experiment("toy")
    sys.modules.pop("toy_experiment", None)


def test_run_saves_validated_result_then_skips_unless_forced(toy, tmp_path):
    out = tmp_path / "results"
    path, ran = run_and_save(toy, RunParams(quick=True), out, log=lambda m: None)
    assert ran and path == result_path(out, "toy", "sim-quick-seed0")
    saved = json.loads(path.read_text())
    assert saved["data"] == {"value": 2.5} and saved["params"]["quick"] is True
    _, ran_again = run_and_save(toy, RunParams(quick=True), out, log=lambda m: None)
    assert not ran_again
    _, forced = run_and_save(toy, RunParams(quick=True), out, force=True, log=lambda m: None)
    assert forced
    assert [r["run_id"] for r in load_results(out, toy)] == ["sim-quick-seed0"]


def test_result_that_fails_its_schema_is_not_written(toy, tmp_path):
    with pytest.raises(InputError, match="fails its schema at value"):
        run_and_save(toy, RunParams(extra={"bad": "true"}), tmp_path, log=lambda m: None)
    assert not any(tmp_path.rglob("*.json"))


def test_wrong_backend_and_unknown_experiment(toy, tmp_path):
    with pytest.raises(InputError, match="runs on backends sim"):
        run_and_save(toy, RunParams(backend="ray"), tmp_path, log=lambda m: None)
    with pytest.raises(InputError, match="unknown experiment"):
        registry.get_experiment("no-such-thing")


def test_corrupt_result_file_is_one_clear_error(toy, tmp_path):
    path = result_path(tmp_path, "toy", "x")
    path.parent.mkdir(parents=True)
    path.write_text('{"experiment": "toy"')
    with pytest.raises(InputError, match="not valid JSON"):
        load_results(tmp_path, toy)


def test_report_has_a_row_for_every_headline_claim(toy, tmp_path):
    run_and_save(toy, RunParams(), tmp_path, log=lambda m: None)
    rows = build_report(str(tmp_path))
    assert {r["claim_id"] for r in rows} == {c["id"] for c in headline_claims()}
    toy_row = next(r for r in rows if r["metric"] == "toy metric")
    assert toy_row["verdict"] == "inside" and toy_row["reproduced"] == 2.5


def test_run_cli_rejects_bad_param(tmp_path):
    from repro.cli import cli
    res = CliRunner().invoke(cli, ["run", "--experiment", "nope"])
    assert res.exit_code != 0 and "nope" in res.output
