"""`repro regression hash`'s fingerprints (repro/regression/hashes.py): a result hashes the same whatever its wall_s,
at any depth, and differently when a number moves."""
import pytest

from repro.regression.hashes import sha256_json, without_wall_s

pytestmark = pytest.mark.regression


def _data(wall_s: float, tok_s: float) -> dict:
    return {"gpu": "A100", "wall_s": wall_s, "groups": [{"points": [{"tok_s": tok_s, "wall_s": wall_s}]}]}


def test_a_hash_ignores_wall_time_and_sees_a_number():
    assert sha256_json(without_wall_s(_data(1.0, 10.0))) == sha256_json(without_wall_s(_data(2.0, 10.0)))
    assert sha256_json(without_wall_s(_data(1.0, 10.0))) != sha256_json(without_wall_s(_data(1.0, 10.5)))
