"""Each design's own headline claim, checked in its own setting on the designs run: a design declares it here
(CLAIMS, keyed by the catalog's name) as a comparison against an arm, on the traces of its setting. An arm is a
design of the catalog, optionally with engine knobs or design knobs changed (vLLM-S with chunked prefill, Llumnix
without migration): a plain arm is read off the same group; one with knobs runs as a group of its own (arm_groups)
by the same curve method, plus, for a latency claim, the rate the claim reads (claim_points). `repro report`
shows one row per claim and trace: the measured value, inside or outside the paper's range, and the counters that
say why; a design absent from the catalog or from the run is "not yet measured"."""
from dataclasses import dataclass, replace

import numpy as np

from repro.experiments.designs.compare import at_rate, grid_rate, ratio_fields
from repro.experiments.designs.counters import design_runner
from repro.experiments.designs.goodput import GOODPUT_TRACES, goodput_row
from repro.experiments.e2e import PAPER
from repro.experiments.sensitivity.experiment import CHUNK_TOKENS
from repro.framework.base import ClaimRow
from repro.serving.tasks import PointTask, RequestSpec
from reference_impl.sim.config import with_engine
from reference_impl.systems.catalog import DESIGNS
from reference_impl.systems.llumnix.knobs import LlumnixKnobs
from reference_impl.systems.pd_disagg.headline import CHATBOT_SLO, PAPER_MAX_RATIO

LONG_TRACES = (3, 4, 5, 6, 7, 8)
BASELINES = ("vllm-m", "vllm-s")  # the groups' baselines: no claim of their own
BASE_COUNTERS = ("prefill_time_share", "remote_attn_kv_bytes", "kv_moved_bytes")


@dataclass(frozen=True)
class Arm:
    design: str
    engine: tuple = ()  # (EngineConfig field, value) pairs changed for this arm
    label: str = ""
    knobs: object = None  # the design's knobs for this arm (SimConfig.design_knobs; None: its defaults)

    @property
    def own_group(self) -> bool:
        return bool(self.engine) or self.knobs is not None

    @property
    def name(self) -> str:
        return self.label or self.design


@dataclass(frozen=True)
class DesignClaim:
    """`metric`: "max_tput" (the design's max throughput over the arm's, per seed, median), "max_tput_per_usd" (the
    same times the arm's cluster price over the design's, normalise.py), "p99_ttft" (the arm's p99 TTFT over the
    design's at the grid rate nearest `load` times the lower saturation of the two) or "goodput" (goodput.py: the
    design's goodput under an SLO over the arm's, per seed, median)."""
    metric: str
    against: Arm
    traces: tuple[int, ...]
    paper: str
    low: float
    high: float
    source: str
    counters: tuple[str, ...] = ()  # the design's own counters that say why (beside BASE_COUNTERS)
    load: float = 0.75


LOONGSERVE_COUNTERS = ("prefill_degree_mean", "ring_kv_hop_bytes", "scale_ups")
CHUNKED_VLLM_S = Arm("vllm-s", (("chunked_prefill_tokens", CHUNK_TOKENS),), f"vllm-s chunked {CHUNK_TOKENS}")
DISPATCH_ONLY = Arm("llumnix", label="llumnix dispatch-only", knobs=LlumnixKnobs(enable_migration=False))
LAMINA_PAPER = ("1.48x-12.1x", 1.48, 12.1, "Lamina (first version): est. throughput per dollar vs vLLM")
SLO = f"TTFT {CHATBOT_SLO.ttft_s} s, TPOT {CHATBOT_SLO.tpot_s} s, {CHATBOT_SLO.attainment:.0%}"
CLAIMS = {
    "infinite-llm": (DesignClaim("max_tput", Arm("vllm-m"), (0, 1, 2), *PAPER["10a"][1:], "infinite-llm Fig 10a"),
                     DesignClaim("max_tput", Arm("vllm-s"), LONG_TRACES, *PAPER["10b"][1:], "infinite-llm Fig 10b")),
    "loongserve": (DesignClaim("max_tput", CHUNKED_VLLM_S, (3, 4, 6), "up to 3.85x", 1.0, 3.85,
                               "LoongServe (SOSP'24): vs chunked prefill", LOONGSERVE_COUNTERS),
                   DesignClaim("max_tput", Arm("pd-disaggregation"), (3, 4, 6), "up to 5.81x", 1.0, 5.81,
                               "LoongServe (SOSP'24): vs prefill/decode disaggregation", LOONGSERVE_COUNTERS)),
    # "about an order of magnitude": within half a decade of 10x
    "llumnix": (DesignClaim("p99_ttft", DISPATCH_ONLY, (0, 1, 2), "~10x (order of magnitude)", 10 ** 0.5,
                            10 ** 1.5, "Llumnix (OSDI'24): tail latency vs dispatch-only instances",
                            ("migrations_completed", "migration_pause_max_s", "migration_bytes")),),
    "pd-disaggregation": (DesignClaim("goodput", Arm("vllm-m"), GOODPUT_TRACES, f"up to {PAPER_MAX_RATIO}x", 1.0,
                                      PAPER_MAX_RATIO, f"DistServe (OSDI'24): goodput under {SLO} vs vLLM"),),
    "lamina": (DesignClaim("max_tput_per_usd", Arm("vllm-m"), (0, 1, 2), *LAMINA_PAPER,
                           ("network_bytes_per_token", "memory_pool_busy_frac", "kv_move_frac")),
               DesignClaim("max_tput_per_usd", Arm("vllm-s"), LONG_TRACES, *LAMINA_PAPER,
                           ("network_bytes_per_token", "memory_pool_busy_frac", "kv_move_frac"))),
}


def arm_groups(groups: list, designs: tuple[str, ...], claims: dict = CLAIMS) -> list:
    """A CurveGroup per arm with engine knobs, per trace of its claim run here, for the claims of `designs`."""
    out, seen = [], set()
    for d in designs:
        for claim in claims.get(d, ()):
            arm = claim.against
            if not arm.own_group or arm.design not in DESIGNS:
                continue
            for g in groups:
                key = (arm, g.info["trace_id"], g.info["num_gpus"])
                if g.info["trace_id"] in claim.traces and key not in seen:
                    seen.add(key)
                    knobs = {arm.design: arm.knobs} if arm.knobs is not None else {}
                    info = {**g.info, "arm": arm.name, "engine": dict(arm.engine), "baseline": arm.design,
                            "_knobs": knobs}
                    out.append(replace(g, info=info, base=with_engine(g.base, **dict(arm.engine)),
                                       systems=(arm.design,), label=f"{g.label} {arm.name}",
                                       runner=design_runner(knobs), saturation_per_s={}, rates_per_s=[],
                                       probe_points={}))
    return out


async def claim_points(arms: list, groups: list[dict], arm_records: list[dict], designs: tuple[str, ...], seeds,
                       sweep, claims: dict = CLAIMS) -> None:
    """An arm of its own group at the rate its latency claim reads on the design's group, every seed (the two
    groups' grids differ), added to the arm's record."""
    for d in designs:
        for claim in (c for c in claims.get(d, ()) if c.metric == "p99_ttft" and c.against.own_group):
            for g, record in zip(arms, arm_records):
                if record.get("arm") != claim.against.name:
                    continue
                group = next((x for x in groups if _same(x, record)), None)
                rate = claim_rate(claim, d, group, record) if group else None
                if rate is None or any(p["rate_per_s"] == rate for p in record["points"]):
                    continue
                record["points"] += await sweep.points(
                    [PointTask(claim.against.design, g.base, RequestSpec(g.make_requests, rate, seed), rate,
                               f"{g.label} claim", seed, g.runner) for seed in seeds])


def claim_rate(claim: DesignClaim, design: str, group: dict, arm_record: dict | None) -> float | None:
    """The rate of the design's grid a latency claim reads: nearest `load` times the lower saturation."""
    own, other = group["designs"].get(design), _arm_row(claim.against, group, [arm_record] if arm_record else [])
    if not own or not other or "saturation_per_s" not in own or "saturation_per_s" not in other:
        return None
    return grid_rate(group["rates_per_s"], claim.load * min(own["saturation_per_s"], other["saturation_per_s"]))


def claim_rows(result: dict, claims: dict = CLAIMS) -> list[dict]:
    """`repro report`'s rows of the designs' own claims from one designs result (module docstring)."""
    data, rows = result["data"], []
    for design, declared in claims.items():
        for claim in declared:
            if design not in DESIGNS or claim.against.design not in DESIGNS:
                absent = design if design not in DESIGNS else claim.against.design
                rows.append(not_measured(design, claim, f"{absent} is not in the catalog"))
                continue
            groups = [g for g in data["groups"] if g["trace_id"] in claim.traces]
            if design not in data["designs"] or not groups:
                rows.append(not_measured(design, claim, f"no {result['run_id']} group of {design} on "
                                                        f"{_traces(claim.traces)}"))
            for g in groups if design in data["designs"] else ():
                if claim.metric == "goodput":
                    rows.append(_row(design, claim, *goodput_row(g, data.get("goodput", []), result["run_id"])))
                    continue
                rows.append(measure(design, claim, g, data.get("arms", []), result["run_id"]))
    for design in DESIGNS:
        if design not in claims and design not in BASELINES:
            rows.append({"claim_id": design, "figure": "", "metric": "its own headline claim",
                         "paper": "", "paper_low": None, "paper_high": None, "reproduced": None, "unit": "",
                         "note": "no claim declared in repro/experiments/designs/claims.py", "verdict": "no claim"})
    return rows


def measure(design: str, claim: DesignClaim, group: dict, arms: list, run_id: str) -> dict:
    where = f"trace {group['trace_id']}, {group['num_gpus']} GPUs"
    own, other = group["designs"].get(design), _arm_row(claim.against, group, arms)
    for name, row in ((design, own), (claim.against.name, other)):
        if row is None or row["status"] != "ok":
            error = "not run" if row is None else row["error"]
            return _row(design, claim, where, None, f"{run_id}: {name} failed: {error}")
    if claim.metric.startswith("max_tput"):
        value = ratio_fields(own["max_tput_tok_s"], other["max_tput_tok_s"])["ratio"]
        note = why(own["at_plateau"], other["at_plateau"], "at each plateau", claim.counters)
        if claim.metric == "max_tput_per_usd" and "hardware" not in own:
            return _row(design, claim, where, None, f"not yet measured: {run_id} predates cost normalisation")
        if claim.metric == "max_tput_per_usd" and value is not None:
            prices = own["hardware"]["price_usd"], other["hardware"]["price_usd"]
            value *= prices[1] / prices[0]
            note = f"${prices[0]:,.0f} vs ${prices[1]:,.0f}; {note}"
    else:
        rate = claim_rate(claim, design, group, _arm_record(claim.against, group, arms))
        arm_at = _arm_record(claim.against, group, arms) or group
        mine, theirs = _at(group, design, rate), _at(arm_at, claim.against.design, rate)
        value = theirs / mine if mine and theirs is not None else None
        at = _at_rate(group, design, rate), _at_rate(arm_at, claim.against.design, rate)
        note = f"p99 TTFT {theirs:.3g} vs {mine:.3g} s; " + why(*at, f"at {rate:.4g} req/s", claim.counters) \
            if value else ""
    return _row(design, claim, where, value, f"{run_id}: {note}")


def why(own: dict | None, other: dict | None, where: str, counters: tuple[str, ...] = ()) -> str:
    """What the design's counters and the arm's say: throughput, preemptions, rejections, BASE_COUNTERS where
    either is non-zero, and the design's own `counters`."""
    if not own or not other:
        return ""
    parts = [f"{own['steady_output_tok_s']:.0f} vs {other['steady_output_tok_s']:.0f} out tok/s {where}"]
    for key, label in (("num_preemptions", "preemptions"), ("num_rejected", "rejected")):
        if own.get(key) or other.get(key):
            parts.append(f"{label} {own[key]:.0f} vs {other[key]:.0f}")
    mine, theirs = own["counters"], other["counters"]
    for key in BASE_COUNTERS:
        a, b = mine.get(key) or 0.0, theirs.get(key) or 0.0
        if a or b:
            parts.append(f"{key} {_num(a)} vs {_num(b)}")
    parts += [f"{key} {_num(mine[key])}" for key in counters if mine.get(key) is not None]
    return "; ".join(parts)


def _arm_row(arm: Arm, group: dict, arms: list) -> dict | None:
    if not arm.own_group:
        return group["designs"].get(arm.design)
    record = _arm_record(arm, group, arms)
    return record["designs"].get(arm.design) if record else None


def _arm_record(arm: Arm, group: dict, arms: list) -> dict | None:
    return next((a for a in arms if a.get("arm") == arm.name and _same(a, group)), None) if arm.own_group else None


def _same(a: dict, b: dict) -> bool:
    return (a["trace_id"], a["num_gpus"]) == (b["trace_id"], b["num_gpus"])


def _at_rate(group: dict, system: str, rate: float) -> dict | None:
    return at_rate([p for p in group["points"] if p["system"] == system], rate)


def _at(group: dict, system: str, rate: float) -> float | None:
    values = [p["p99_ttft_s"] for p in group["points"]
              if p["system"] == system and p["rate_per_s"] == rate and p.get("p99_ttft_s") is not None]
    return float(np.median(values)) if values else None


def not_measured(design: str, claim: DesignClaim, why: str) -> dict:
    return _row(design, claim, None, None, f"not yet measured: {why}")


def _row(design: str, claim: DesignClaim, where: str | None, value: float | None, note: str) -> dict:
    what = {"max_tput": "max tput", "max_tput_per_usd": "tput per $", "goodput": "goodput"}.get(claim.metric,
                                                                                           "p99 TTFT ratio")
    row = ClaimRow(design, f"{what} vs {claim.against.name}, {where or _traces(claim.traces)}",
                   claim.paper, claim.low, claim.high, value, "x", note)
    verdict = "not yet measured" if value is None else "inside" if claim.low < value <= claim.high else "outside"
    return {**{k: getattr(row, k) for k in ClaimRow.__slots__}, "figure": claim.source, "verdict": verdict}


def _traces(traces) -> str:
    return "traces " + ",".join(map(str, traces))


def _num(x: float) -> str:
    return f"{x:.3g}" if abs(x) < 1e4 else f"{x:.2e}"
