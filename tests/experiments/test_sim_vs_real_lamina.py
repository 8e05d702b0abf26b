"""sim-vs-real's Lamina arm without Ray: whether the simulator ranks the designs as measured, from points."""
from repro.experiments.sim_vs_real.lamina_arm import ranking


def _point(system, rate, measured_tok_s, predicted_tok_s, measured_ttft_s, predicted_ttft_s):
    return {"system": system, "rate_per_s": rate, "measured_output_tok_s": measured_tok_s,
            "predicted_output_tok_s": predicted_tok_s, "measured_mean_ttft_s": measured_ttft_s,
            "predicted_mean_ttft_s": predicted_ttft_s}


def test_the_ranking_compares_the_best_throughput_and_the_median_ttft_of_each_side():
    points = [_point("lamina", 1.0, 10.0, 10.0, 0.05, 0.02), _point("lamina", 9.0, 90.0, 80.0, 0.06, 0.03),
              _point("infinite-llm", 1.0, 10.0, 10.0, 0.04, 0.01), _point("infinite-llm", 9.0, 80.0, 95.0, 0.05, 0.02)]
    rank = ranking(points)
    assert rank["measured"]["output_tok_s"] == ["lamina", "infinite-llm"]
    assert rank["predicted"]["output_tok_s"] == ["infinite-llm", "lamina"]
    assert rank["same"] == {"output_tok_s": False, "mean_ttft_s": True}
