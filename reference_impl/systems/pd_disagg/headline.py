"""DistServe's headline checked on this simulator: goodput (the highest request rate at which a share of requests
meets both a TTFT and a TPOT SLO) of the split cluster against co-located vLLM-M on the same GPUs. DistServe reports
up to 7.4x (OSDI'24 abstract); its chatbot setting (OPT-13B, ShareGPT) uses TTFT 0.25 s, TPOT 0.1 s and 90%
attainment (LLMServe/DistServe evaluation/ae-scripts/e2e/_plot.py, plot_fig8_lower). Goodput is found as DistServe's
simulator does (simdistserve/benchmarks/search_binary.py): bisection of the rate on attainment, here from a
doubling search for the first rate that misses."""
from dataclasses import dataclass, replace
from typing import Callable

from reference_impl.serving.records import FINISHED, tpot_s
from reference_impl.sim.config import SimConfig
from reference_impl.systems.run import simulate
from reference_impl.systems.pd_disagg.configure import split_of
from reference_impl.systems.pd_disagg.knobs import PDKnobs, shape_of
from reference_impl.systems.registry import system_config

PAPER_MAX_RATIO = 7.4


@dataclass(frozen=True, slots=True)
class Slo:
    ttft_s: float
    tpot_s: float
    attainment: float = 0.9


CHATBOT_SLO = Slo(ttft_s=0.25, tpot_s=0.1)  # DistServe's OPT-13B ShareGPT chatbot (module docstring)


@dataclass(frozen=True, slots=True)
class Goodput:
    system: str
    goodput_req_s: float  # the highest rate found that meets the SLO (0: none down to the floor)
    attainment: float  # at that rate
    p99_tpot_s: float | None
    counters: dict


@dataclass(frozen=True, slots=True)
class Comparison:
    pd: Goodput
    vllm_m: Goodput
    split: str  # e.g. "3x tp1 prefill + 1x tp1 decode"

    @property
    def ratio(self) -> float | None:
        return self.pd.goodput_req_s / self.vllm_m.goodput_req_s if self.vllm_m.goodput_req_s else None


def attainment(result, slo: Slo) -> float:
    """Share of all requests (rejected and unfinished ones miss) meeting both SLOs; a one-token output has no TPOT."""
    met = 0
    for r in result.requests:
        if r.status == FINISHED and r.first_token_s - r.arrival_s <= slo.ttft_s:
            t = tpot_s(r)
            met += t is None or t <= slo.tpot_s
    return met / len(result.requests)


def goodput(system: str, config: SimConfig, make_requests: Callable[[float], list], slo: Slo, *,
            start_req_s: float = 0.5, floor_req_s: float = 1 / 64, bisections: int = 6,
            ceiling_req_s: float = float("inf")) -> Goodput:
    """The highest rate of `make_requests(rate)` that `config` serves within `slo` (module docstring); the doubling
    stops at `ceiling_req_s` (a few requests may meet the SLO even as one burst: their goodput is unbounded)."""
    def run(rate):
        result = simulate(config, make_requests(rate))
        return attainment(result, slo), result
    good, bad = None, None
    rate = start_req_s
    while rate >= floor_req_s and good is None:
        got = run(rate)
        if got[0] >= slo.attainment:
            good = (rate, *got)
        else:
            bad, rate = rate, rate / 2
    if good is None:
        return Goodput(system, 0.0, 0.0, None, {})
    while bad is None and good[0] < ceiling_req_s:
        rate = good[0] * 2
        got = run(rate)
        if got[0] >= slo.attainment:
            good = (rate, *got)
        else:
            bad = rate
    for _ in range(bisections if bad is not None else 0):
        rate = (good[0] + bad) / 2
        got = run(rate)
        if got[0] >= slo.attainment:
            good = (rate, *got)
        else:
            bad = rate
    rate, att, result = good
    return Goodput(system, rate, att, result.summary().p99_tpot_ms / 1e3 if result.summary().p99_tpot_ms else None,
                   dict(result.design_counters))


def compare(base: SimConfig, make_requests: Callable[[float], list], slo: Slo = CHATBOT_SLO, **search) -> Comparison:
    """Goodput of pd-disaggregation (its split searched for the requests' shape) and of vLLM-M on `base`'s GPUs
    (`search`: goodput's keyword arguments)."""
    shape = shape_of(make_requests(1.0))  # (lengths do not depend on the rate)
    pd_config = system_config("pd-disaggregation", replace(base, design_knobs=PDKnobs(workload=shape)))
    s = split_of(pd_config)
    split = (f"{s.num_prefill}x tp{s.prefill.tp}pp{s.prefill.pp} prefill + "
             f"{s.num_decode}x tp{s.decode.tp}pp{s.decode.pp} decode")
    return Comparison(goodput("pd-disaggregation", pd_config, make_requests, slo, **search),
                      goodput("vllm-m", system_config("vllm-m", base), make_requests, slo, **search), split)
