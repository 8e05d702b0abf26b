import json
import math

from reference_impl.atomic import write_json_atomic


def _reject_constants(name):
    raise ValueError(f"non-standard JSON constant {name}")


def test_results_are_strict_json_and_read_back_as_floats(tmp_path):
    record = {"rates_per_s": [2.0, math.inf], "points": [{"rate_per_s": math.inf, "gap": -math.inf,
                                                           "ratio": math.nan, "tok_s": 12.5}]}
    path = write_json_atomic(tmp_path / "r.json", record)
    loaded = json.loads(path.read_text(), parse_constant=_reject_constants)  # a strict parser's view
    point = loaded["points"][0]
    assert float(loaded["rates_per_s"][1]) == math.inf and float(point["gap"]) == -math.inf
    assert math.isnan(float(point["ratio"])) and point["tok_s"] == 12.5


def test_the_point_store_keeps_pythons_dialect(tmp_path):
    from repro.serving.keys import canonical
    from repro.serving.store import PointStore

    store, point = PointStore(tmp_path), {"rate_per_s": math.inf, "steady_output_tok_s": 3.0}
    store.put("ab" * 32, {}, point, 1.0)
    got = store.get("ab" * 32)
    assert got is not None and canonical(got.point) == canonical(point)  # a burst probe's entry stays trusted
