"""`repro regression hash`'s fingerprints: a result's points hash the same whatever their wall_s and differently when
a number moves; a simulated case hashes the same twice and differently when its design changes."""
import json
from dataclasses import replace

import pytest

from repro.regression.hashes import CASES, e2e_points_hash, run_case

pytestmark = pytest.mark.regression


def _result(tmp_path, wall_s: float, tok_s: float):
    path = tmp_path / f"r{wall_s}-{tok_s}.json"
    points = [{"system": "infinite-llm", "steady_output_tok_s": tok_s, "wall_s": wall_s}]
    path.write_text(json.dumps({"data": {"gpu": "A100", "groups": [{"trace_id": 0, "points": points}]}}))
    return path


def test_points_hash_ignores_wall_time_and_sees_a_number(tmp_path):
    assert e2e_points_hash(_result(tmp_path, 1.0, 10.0)) == e2e_points_hash(_result(tmp_path, 2.0, 10.0))
    assert e2e_points_hash(_result(tmp_path, 1.0, 10.0)) != e2e_points_hash(_result(tmp_path, 1.0, 10.5))


def test_a_case_hashes_the_same_twice_and_another_design_differently():
    case = replace(CASES[0], num_requests=8)
    assert run_case(case) == run_case(case)
    assert run_case(case) != run_case(replace(case, design="vllm-m"))
