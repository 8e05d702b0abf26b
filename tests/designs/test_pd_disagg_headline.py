"""pd-disaggregation's headline measure (reference_impl/systems/pd_disagg/headline.py): SLO attainment by hand,
and goodput as a rate the system meets the SLO at."""
from dataclasses import replace

from reference_impl.serving.records import FINISHED, REJECTED, RequestRecord, ServingRun
from reference_impl.systems.run import simulate
from reference_impl.systems.pd_disagg.headline import Slo, attainment, compare, goodput
from reference_impl.systems.pd_disagg.knobs import PDKnobs, shape_of
from reference_impl.systems.registry import cluster, system_config
from workloads.request import Request


def record(i, ttft_s, tpot_s, output_len=11, status=FINISHED):
    r = RequestRecord(i, 1.0, 100, output_len, status=status)
    if status == FINISHED:
        r.first_token_s, r.finish_s = 1.0 + ttft_s, 1.0 + ttft_s + tpot_s * (output_len - 1)
    return r


def test_attainment_counts_requests_within_both_slos_of_all_requests():
    slo = Slo(ttft_s=0.5, tpot_s=0.1)
    run = ServingRun([record(0, 0.4, 0.05), record(1, 0.6, 0.05), record(2, 0.4, 0.2),
                      record(3, 0.4, 9.0, output_len=1),  # one token: no TPOT to miss
                      record(4, 0, 0, status=REJECTED)])
    assert attainment(run, slo) == 2 / 5


def test_goodput_is_a_rate_each_system_meets_the_slo_at():
    def make(rate):
        return [Request(i, i / rate, 400 + 50 * (i % 5), 30, "fixed") for i in range(40)]
    base = cluster("llama2-7b", "A100-80GB-SXM", 2)
    slo = Slo(ttft_s=0.5, tpot_s=0.05)
    c = compare(base, make, slo)
    assert c.pd.goodput_req_s > 0 and c.vllm_m.goodput_req_s > 0
    assert c.ratio == c.pd.goodput_req_s / c.vllm_m.goodput_req_s
    pd = system_config("pd-disaggregation", replace(base, design_knobs=PDKnobs(workload=shape_of(make(1.0)))))
    for config, g in ((pd, c.pd), (system_config("vllm-m", base), c.vllm_m)):
        assert attainment(simulate(config, make(g.goodput_req_s)), slo) == g.attainment >= slo.attainment


def test_goodput_of_requests_that_meet_the_slo_as_one_burst_stops_at_the_ceiling():
    def make(rate):  # two short requests: even arriving together both meet a loose SLO
        return [Request(i, i / rate, 100, 5, "fixed") for i in range(2)]
    g = goodput("vllm-m", system_config("vllm-m", cluster("llama2-7b", "A100-80GB-SXM", 2)), make,
                Slo(ttft_s=10.0, tpot_s=10.0), ceiling_req_s=64.0)
    assert 64.0 <= g.goodput_req_s < 128.0 and g.attainment == 1.0
