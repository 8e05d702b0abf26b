"""The one serving summary (reference_impl/serving/records.py): the steady-state window by hand, the fallback for
bursts, and the same numbers from the simulator's and the real engines' request records."""
import pytest
from jsonschema import validate

from baselines.real_vllm.metrics import ServedRequest, serving_point, summarize
from reference_impl.serving.points import ServingPoint
from reference_impl.serving.records import FINISHED, RequestRecord, ServingRun, summarize_records, tpot_s
from repro.results import load_schema


def _records(cls, n=10):
    # request i arrives at i s, prompt 10 + i, 3 tokens; first token 0.5 s after arrival, done 2 s after
    return [cls(i, float(i), 10 + i, 3, status=FINISHED, first_token_s=i + 0.5, finish_s=i + 2.0) for i in range(n)]


def test_steady_window_excludes_warm_up_and_drain():
    records = _records(RequestRecord)
    ends = [t + 0.25 for t in range(12)]  # a step each second from 0.25 to 11.25
    tokens = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]
    s = summarize_records(records, ends, tokens)
    # window: arrival of request ceil(0.1 * 10) = 1 (t = 1) to the later of the last arrival (t = 9) and the
    # 9th finish (t = 10): steps at 1.25 .. 9.25, tokens 2 .. 10
    assert s.steady_window_s == pytest.approx(9.0)
    assert s.steady_output_tok_s == pytest.approx(sum(range(2, 11)) / 9.0)
    prompts_inside = [10 + i for i in range(10) if 1.0 <= i + 0.5 <= 10.0]  # first tokens of requests 1..9
    assert s.steady_total_tok_s == pytest.approx(sum(range(2, 11)) / 9.0 + sum(prompts_inside) / 9.0)
    # the makespan rate counts the drain: 30 tokens over 11 s (first arrival to last finish)
    assert s.output_tok_s == pytest.approx(30 / 11.0)
    assert s.mean_norm_latency_s == pytest.approx(2.0 / 3) and s.mean_ttft_s == pytest.approx(0.5)


def test_a_burst_falls_back_to_the_whole_run():
    records = [RequestRecord(i, 0.0, 8, 4, status=FINISHED, first_token_s=1.0, finish_s=4.0) for i in range(5)]
    s = summarize_records(records, [1.0, 4.0], [5, 15])
    assert s.steady_output_tok_s == pytest.approx(20 / 4.0) == s.output_tok_s
    assert s.steady_total_tok_s == pytest.approx((20 + 40) / 4.0)


def test_sim_and_real_records_give_one_summary_and_one_point():
    ends, tokens = [0.5 + t for t in range(12)], [2] * 12
    sim, real = _records(RequestRecord), _records(ServedRequest)
    a = ServingRun(sim, step_end_s=ends, step_tokens=tokens).summary()
    b = summarize(real, ends, tokens)
    assert a == b
    point = serving_point("vllm-m", 1.0, b, wall_s=1.0)
    assert point == ServingPoint.of("vllm-m", 1.0, a, wall_s=1.0).to_dict()
    assert point["steady_output_tok_s"] == pytest.approx(2.0) and point["idle_waiting_frac"] == 0.0


def test_tpot_counts_only_finished_requests_of_two_or_more_tokens_and_reaches_the_point():
    # by hand: request 0 makes 5 tokens, the last 4 over 2 s (0.5 s each); request 1 makes 3, the last 2 over 3 s
    records = [RequestRecord(0, 0.0, 4, 5, status=FINISHED, first_token_s=1.0, finish_s=3.0),
               RequestRecord(1, 0.5, 4, 3, status=FINISHED, first_token_s=1.5, finish_s=4.5),
               RequestRecord(2, 1.0, 4, 1, status=FINISHED, first_token_s=2.0, finish_s=2.0),  # no TPOT
               RequestRecord(3, 1.5, 4, 9)]  # unfinished: no TPOT
    assert [tpot_s(r) for r in records] == [0.5, 1.5, None, None]
    s = summarize_records(records)
    assert s.mean_tpot_s == pytest.approx(1.0) and s.mean_tpot_ms == pytest.approx(1e3 * s.mean_tpot_s)
    assert s.mean_tpot_s < s.p99_tpot_s <= 1.5
    point = ServingPoint.of("infinite-llm", 1.0, s, wall_s=0.0).to_dict()
    assert (point["mean_tpot_s"], point["p99_tpot_s"]) == (s.mean_tpot_s, s.p99_tpot_s)
    schema = load_schema("serving.schema.json")
    validate(point, {**schema["$defs"]["point"], "$defs": schema["$defs"]})  # the record the schema accepts
    assert summarize_records(records[2:]).mean_tpot_s is None
