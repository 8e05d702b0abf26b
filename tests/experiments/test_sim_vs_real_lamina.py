"""sim-vs-real's Ray arms without Ray: whether the simulator ranks the designs as measured, from points."""
from repro.experiments.sim_vs_real.ray_runs import ranking


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


def test_the_pd_arm_simulates_the_split_that_runs_for_real():
    """The simulated split's prefill instances are the real run's homes (those that take new requests), and the
    real rule moves requests off exactly those."""
    from reference_impl.backends.ray.serving import engine_run
    from reference_impl.systems.catalog import design
    from repro.experiments.sim_vs_real.pd_arm import PD, real_knobs

    for num_instances in (2, 4):
        knobs = real_knobs(num_instances)
        run = engine_run(design(PD), num_instances, 16, 8, max_batch_size=4, knobs=knobs)
        assert run.homes == tuple(range(knobs.num_prefill)) == run.moves.prefill
        assert run.config.num_instances == num_instances and knobs.num_prefill < num_instances


def test_the_ranking_orders_any_number_of_designs():
    points = [_point(s, 1.0, tok_s, tok_s, ttft, ttft) for s, tok_s, ttft in
              (("pd-disaggregation", 50.0, 0.03), ("infinite-llm", 80.0, 0.02), ("llumnix", 60.0, 0.01))]
    rank = ranking(points)
    assert rank["measured"]["output_tok_s"] == ["infinite-llm", "llumnix", "pd-disaggregation"]
    assert rank["measured"]["mean_ttft_s"] == ["llumnix", "infinite-llm", "pd-disaggregation"]
    assert rank["same"] == {"output_tok_s": True, "mean_ttft_s": True}
