import json
import tempfile
from pathlib import Path

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reference_impl.errors import InputError
from workloads.generate import SourceOptions, generate
from workloads.io import SCHEMA_PATH, _is_valid, load_jsonl, save_jsonl
from workloads.request import Request

GOOD = {"req_id": 3, "arrival_s": 0.25, "prompt_len": 10, "output_len": 2, "source": "fitted:trace-0"}


def test_round_trip_is_byte_identical(tmp_path):
    requests = generate(trace_id=0, num_requests=257, rate_per_s=3.3, seed=1, options=SourceOptions(source="fitted"))
    requests += [Request(257, 1e-9, 1, 1, 'odd "name" \u00e9\n')]
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    save_jsonl(first, requests)
    loaded = load_jsonl(first)
    assert loaded == requests
    save_jsonl(second, loaded)
    assert first.read_bytes() == second.read_bytes()


def test_saved_lines_follow_the_schema(tmp_path):
    path = tmp_path / "w.jsonl"
    save_jsonl(path, generate(dataset_id=5, num_requests=20, rate_per_s=1.0, seed=0))
    schema = json.loads(SCHEMA_PATH.read_text())
    for line in path.read_text().splitlines():
        jsonschema.validate(json.loads(line), schema)


BAD_RECORDS = [
    {**GOOD, "prompt_len": 0},
    {**GOOD, "output_len": -1},
    {**GOOD, "arrival_s": -0.5},
    {**GOOD, "req_id": "3"},
    {**GOOD, "prompt_len": 1.5},
    {**GOOD, "prompt_len": True},
    {**GOOD, "extra": 1},
    {k: v for k, v in GOOD.items() if k != "source"},
    [1, 2],
    {**GOOD, "prompt_len": 10**23},
    {**GOOD, "output_len": 2**31},
]


@pytest.mark.parametrize("record", BAD_RECORDS)
def test_bad_record_is_one_line_error_and_agrees_with_schema(tmp_path, record):
    schema = json.loads(SCHEMA_PATH.read_text())
    assert not jsonschema.Draft202012Validator(schema).is_valid(record)
    assert not _is_valid(record)
    path = tmp_path / "w.jsonl"
    path.write_text(json.dumps(GOOD) + "\n" + json.dumps(record) + "\n")
    with pytest.raises(InputError) as info:
        load_jsonl(path)
    assert f"{path}:2:" in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("record, field", [
    ({**GOOD, "prompt_len": 10.5}, "prompt_len must be an integer"),
    ({**GOOD, "prompt_len": 1e23}, "prompt_len must be an integer"),
    ({**GOOD, "prompt_len": 10.0}, "prompt_len must be an integer"),  # the schema's "integer" allows 10.0
    ({**GOOD, "output_len": 10**23}, "output_len 1.000e23 is out of range"),
    ({**GOOD, "output_len": "7"}, "output_len must be an integer"),
    ({**GOOD, "req_id": -1}, "req_id must be"),
    ({**GOOD, "source": 3}, "source must be a string"),
    ({k: v for k, v in GOOD.items() if k != "arrival_s"}, "missing field(s) arrival_s"),
])
def test_bad_field_is_named(tmp_path, record, field):
    path = tmp_path / "w.jsonl"
    path.write_text(json.dumps(record) + "\n")
    with pytest.raises(InputError) as info:
        load_jsonl(path)
    assert field in str(info.value) and "arrival_s must" not in str(info.value).replace(field, "")


@pytest.mark.parametrize("text, message", [
    ("", "empty workload file"),
    ("\n\n", "empty workload file"),
    (json.dumps(GOOD) + "\n" + json.dumps({**GOOD, "prompt_len": 5}) + "\n", ":2: req_id 3 repeats line 1"),
    ('{"req_id": ' + "9" * 5000 + "}\n", ":1: not valid JSON"),
])
def test_empty_file_and_repeated_ids_are_rejected(tmp_path, text, message):
    path = tmp_path / "w.jsonl"
    path.write_text(text)
    with pytest.raises(InputError, match=message):
        load_jsonl(path)


def test_fast_check_accepts_what_the_schema_accepts():
    assert _is_valid(GOOD) and _is_valid({**GOOD, "arrival_s": 0})


@pytest.mark.parametrize("text, message", [
    ('{"req_id": 0, "arrival_s": 0.0, "prompt_len": 1, "output_len": 1, "source": "x"}\nnot json\n', ":2: not valid JSON"),
    ('{"req_id": 0, "arrival_s": 0.0, "prompt_len": 1, "output_len": 1, "source": "x"}\n{"req_id": 1, "arr', "truncated"),
    ('{"req_id": 0, "arrival_s": NaN, "prompt_len": 1, "output_len": 1, "source": "x"}\n', ":1:"),
])
def test_malformed_or_truncated_file(tmp_path, text, message):
    path = tmp_path / "w.jsonl"
    path.write_text(text)
    with pytest.raises(InputError, match=message):
        load_jsonl(path)


def test_missing_file(tmp_path):
    with pytest.raises(InputError, match="no such workload file"):
        load_jsonl(tmp_path / "nope.jsonl")


def test_failed_save_leaves_no_file(tmp_path):
    path = tmp_path / "w.jsonl"

    def requests():
        yield Request(0, 0.0, 1, 1, "x")
        raise RuntimeError("generator failed half-way")

    with pytest.raises(RuntimeError):
        save_jsonl(path, requests())
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(InputError, match="does not exist"):
        save_jsonl(tmp_path / "no-dir" / "w.jsonl", [Request(0, 0.0, 1, 1, "x")])


def test_request_rejects_impossible_values():
    with pytest.raises(InputError):
        Request(0, 0.0, 0, 1, "x")
    with pytest.raises(InputError):
        Request(0, float("nan"), 1, 1, "x")
    assert Request(0, 1.0, 3, 4, "x").context_len == 7


@settings(max_examples=60, deadline=None)
@given(st.lists(st.builds(Request, req_id=st.integers(0, 2**40), arrival_s=st.floats(0, 1e9, allow_nan=False),
                          prompt_len=st.integers(1, 10**7), output_len=st.integers(1, 10**6), source=st.text()),
                min_size=1, max_size=20, unique_by=lambda r: r.req_id))
def test_round_trip_property(requests):
    with tempfile.TemporaryDirectory() as tmp:
        first, second = Path(tmp) / "a.jsonl", Path(tmp) / "b.jsonl"
        save_jsonl(first, requests)
        assert load_jsonl(first) == requests
        save_jsonl(second, load_jsonl(first))
        assert first.read_bytes() == second.read_bytes()
