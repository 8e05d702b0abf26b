"""Prefill/decode disaggregation's split search (reference_impl/systems/pd_disagg/split.py): every split it weighs
uses the cluster's GPUs exactly, the pick is the best of them and repeatable, longer prompts against outputs move
GPUs to prefill, and the design's config is the split it reports."""
from dataclasses import replace

import pytest
from hypothesis import given, settings, strategies as st

from reference_impl.errors import InputError
from reference_impl.systems.pd_disagg.configure import default_shape, split_of
from reference_impl.systems.pd_disagg.knobs import PDKnobs, WorkloadShape, shape_of
from reference_impl.systems.pd_disagg.split import all_estimates, instance_model, search_split
from reference_impl.systems.registry import cluster, system_config
from workloads.request import Request

GPU = "A100-80GB-SXM"


def shape(prompt, output):
    return WorkloadShape(prompt, output, prompt + output)


def best(model, gpus, s, **fixed):
    return search_split(cluster(model, GPU, gpus), gpus, s, PDKnobs(**fixed))


@settings(max_examples=25, deadline=None)
@given(gpus=st.sampled_from([2, 4, 8, 16, 32]), prompt=st.integers(1, 60_000), output=st.integers(1, 4_000))
def test_every_split_uses_exactly_the_clusters_gpus_and_the_pick_is_the_best_of_them(gpus, prompt, output):
    base = cluster("llama2-7b", GPU, gpus)
    estimates = list(all_estimates(base, gpus, shape(prompt, output)))
    assert estimates
    for e in estimates:
        s = e.split
        assert s.num_prefill >= 1 and s.num_decode >= 1
        assert s.num_prefill * s.prefill.tp * s.prefill.pp + s.num_decode * s.decode.tp * s.decode.pp == gpus
        assert s.prefill.tp <= 8 and s.decode.tp <= 8 and (s.prefill.pp == 1 or s.prefill.tp == 8)
    picked = search_split(base, gpus, shape(prompt, output))
    top = max((e.fits, e.max_req_s) for e in estimates)
    assert (picked.fits, picked.max_req_s) == top
    assert search_split(base, gpus, shape(prompt, output)) == picked  # deterministic


@pytest.mark.parametrize("model,gpus", [("llama2-7b", 4), ("llama2-7b", 8), ("llama2-13b", 8), ("llama2-7b", 16)])
def test_long_prompts_and_short_outputs_get_more_prefill_gpus_than_short_prompts_and_long_outputs(model, gpus):
    prompt_heavy = best(model, gpus, shape(2000, 20)).split
    output_heavy = best(model, gpus, shape(20, 2000)).split
    assert prompt_heavy.prefill_gpus > output_heavy.prefill_gpus
    assert prompt_heavy.decode_gpus < output_heavy.decode_gpus


@pytest.mark.parametrize("gpus,context", [(8, 512), (16, 2048)])
def test_prefill_gpus_never_fall_as_the_prompts_share_of_a_fixed_context_grows(gpus, context):
    """With one instance shape on both sides (tp changes are a second axis), shifting tokens from output to
    prompt never takes GPUs from prefill."""
    counts = [best("llama2-7b", gpus, shape(p, context - p), prefill_tp=1, decode_tp=1).split.prefill_gpus
              for p in range(context // 16, context, context // 16)]
    assert counts == sorted(counts) and counts[-1] > counts[0]


def test_the_bottleneck_side_sets_the_estimate_and_more_instances_of_a_side_raise_its_rate():
    base = cluster("llama2-7b", GPU, 8)
    estimates = {(e.split.num_prefill, e.split.prefill.tp, e.split.decode.tp): e
                 for e in all_estimates(base, 8, shape(900, 90))}
    for e in estimates.values():
        assert e.max_req_s == min(e.prefill_req_s, e.decode_req_s)
    for n in range(1, 7):
        lo, hi = estimates[(n, 1, 1)], estimates[(n + 1, 1, 1)]
        assert hi.prefill_req_s == pytest.approx(lo.prefill_req_s * (n + 1) / n)
        assert hi.decode_req_s == pytest.approx(lo.decode_req_s * (7 - n) / (8 - n))


def test_a_long_context_that_fits_no_instance_of_a_split_rules_it_out_where_another_fits():
    base = cluster("llama2-7b", GPU, 8)
    tp1 = instance_model(base, split_of(system_config("pd-disaggregation", base)).decode).memory.kv_capacity_tokens
    long_tail = WorkloadShape(900, 90, tp1 + 1000)  # the mean favours tp=1, the long context needs more
    picked = search_split(base, 8, long_tail)
    assert picked.fits and picked.split.decode.tp > 1


def test_the_design_config_is_the_split_it_reports_and_honours_fixed_knobs():
    base = cluster("llama2-7b", GPU, 8)
    config = system_config("pd-disaggregation", replace(base, design_knobs=PDKnobs(num_prefill=2, prefill_tp=1,
                                                                                   decode_tp=2)))
    s = split_of(config)
    assert (s.num_prefill, s.prefill.tp, s.num_decode, s.decode.tp) == (2, 1, 3, 2)
    assert config.engine.num_instances == 5 and not config.engine.pooling and config.tp == 2
    assert s.num_gpus == 8


def test_two_gpus_make_one_prefill_and_one_decode_instance():
    s = split_of(system_config("pd-disaggregation", cluster("llama2-7b", GPU, 2)))
    assert (s.num_prefill, s.num_decode, s.prefill.num_gpus, s.decode.num_gpus) == (1, 1, 1, 1)


def test_the_workload_knob_moves_the_split_and_the_trace_free_default_is_used_without_it():
    base = cluster("llama2-7b", GPU, 8)
    reqs = [Request(i, 0.0, 2000, 20, "t") for i in range(4)]
    assert shape_of(reqs) == shape(2000, 20)
    tail = [Request(i, 0.0, 10 if i else 5000, 10, "t") for i in range(200)]  # 1 in 200: above the 99th percentile
    assert shape_of(tail).long_context_tokens == 20
    knobs = PDKnobs(workload=shape_of(reqs))
    with_trace = split_of(system_config("pd-disaggregation", replace(base, design_knobs=knobs)))
    assert with_trace == best("llama2-7b", 8, shape(2000, 20)).split
    default = system_config("pd-disaggregation", base)
    assert default.design_knobs.workload == default_shape(base)
    assert split_of(default) == search_split(base, 8, default_shape(base)).split


def test_a_split_that_cannot_be_made_is_one_clear_error():
    with pytest.raises(InputError, match="no prefill/decode split of 4 GPUs"):
        system_config("pd-disaggregation", replace(cluster("llama2-7b", GPU, 4),
                                                   design_knobs=PDKnobs(num_prefill=4)))
    with pytest.raises(InputError, match="no requests"):
        shape_of([])
