"""pd-disaggregation's headline on the designs run: DistServe's goodput under its chatbot SLO against co-located
vLLM-M on the same GPUs, by reference_impl/systems/pd_disagg/headline.py's `compare` (the split searched for the
requests' shape, goodput by doubling and bisection of the rate), on each group of GOODPUT_TRACES at the group's
size, every seed, a job of the run's sweep each (`data.goodput`); claims.py reads the median ratio per group. The
rate search stops at the rate at which the group's requests all arrive within the TTFT SLO (`ceiling_req_s`): a
goodput there is a lower bound (a few requests may meet the SLO as one burst)."""
from functools import partial

import numpy as np

from repro.serving.tasks import workload
from reference_impl.systems.pd_disagg.headline import CHATBOT_SLO, compare

GOODPUT_TRACES = (0, 1, 2)  # DistServe's chatbot setting: short ShareGPT-like requests


def requests(trace_id: int, num_requests: int, source: str, seed: int, rate_per_s: float):
    return workload(trace_id=trace_id, num_requests=num_requests, rate_per_s=rate_per_s, seed=seed, source=source)


def goodput_of(base, trace_id: int, num_requests: int, source: str, seed: int) -> dict:
    """One `data.goodput` record: headline.compare on `base`'s GPUs for the group's requests at `seed`."""
    ceiling = num_requests / CHATBOT_SLO.ttft_s
    c = compare(base, partial(requests, trace_id, num_requests, source, seed), ceiling_req_s=ceiling)
    return {"trace_id": trace_id, "num_gpus": base.num_gpus, "seed": seed, "split": c.split, "ratio": c.ratio,
            "ceiling_req_s": ceiling,
            **{f"{name}_{key}": getattr(g, key) for name, g in (("pd", c.pd), ("vllm_m", c.vllm_m))
               for key in ("goodput_req_s", "attainment", "p99_tpot_s")}}


async def goodput_jobs(groups: list, designs: tuple[str, ...], seeds, source: str, sweep) -> list[dict]:
    """goodput_of for every group of GOODPUT_TRACES and seed, when pd-disaggregation is asked for."""
    if "pd-disaggregation" not in designs:
        return []
    todo = [(g, seed) for g in groups if g.info["trace_id"] in GOODPUT_TRACES for seed in seeds]
    return list(await sweep.gather(*(
        sweep.job(partial(goodput_of, g.base, g.info["trace_id"], g.info["num_requests"], source, seed),
                  f"{g.label} goodput seed {seed}", cost=float(g.info["num_requests"]),
                  system="pd-disaggregation goodput") for g, seed in todo)))


def goodput_row(group: dict, records: list[dict], run_id: str) -> tuple[str, float | None, str]:
    """(where, the median ratio over seeds, note) of the claim on `group`."""
    where = f"trace {group['trace_id']}, {group['num_gpus']} GPUs"
    mine = [r for r in records if (r["trace_id"], r["num_gpus"]) == (group["trace_id"], group["num_gpus"])]
    ratios = [r["ratio"] for r in mine if r["ratio"] is not None]
    if not ratios:
        return where, None, f"not yet measured: no goodput of {run_id} here" if not mine else \
            f"{run_id}: vLLM-M meets the SLO at no rate down to the floor"
    med = {k: float(np.median([r[k] for r in mine])) for k in ("pd_goodput_req_s", "vllm_m_goodput_req_s")}
    tpot = [(r["pd_p99_tpot_s"], r["vllm_m_p99_tpot_s"]) for r in mine if None not in (r["pd_p99_tpot_s"],
                                                                                          r["vllm_m_p99_tpot_s"])]
    capped = sum(r[k] >= r["ceiling_req_s"] for r in mine for k in ("pd_goodput_req_s", "vllm_m_goodput_req_s"))
    note = (f"{run_id}: {med['pd_goodput_req_s']:.3g} vs {med['vllm_m_goodput_req_s']:.3g} req/s (median of "
            f"{len(mine)} seeds{f'; {capped} at the ceiling, a lower bound' if capped else ''}); "
            f"split {mine[0]['split']}")
    if tpot:
        note += f"; p99 TPOT at goodput {np.median([a for a, _ in tpot]):.3g} vs {np.median([b for _, b in tpot]):.3g} s"
    return where, float(np.median(ratios)), note
