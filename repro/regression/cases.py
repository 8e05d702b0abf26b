"""The fixed simulated configurations the reproduced-numbers guard re-runs: quick, seeded, each covering a
mechanism the figures depend on. A case runs an experiment's own `run` (the entry point of `repro run`) and
reads its numbers into a flat {key: value} map; `feeds` names the figures they end up in and the make target
that redraws them."""
from collections.abc import Callable
from dataclasses import dataclass

from repro.experiments.dgfm import last_third_tok_s
from repro.framework.base import RunParams
from repro.framework.registry import get_experiment

Numbers = dict[str, float | None]


@dataclass(frozen=True, slots=True)
class RegressionCase:
    name: str
    experiment: str
    extra: dict  # --param KEY=VALUE, as strings (the experiment types them)
    make_target: str
    numbers: Callable[[dict], Numbers]  # the experiment's data -> flat numbers

    @property
    def feeds(self) -> str:
        figures = ", ".join(get_experiment(self.experiment).figures)
        return f"{figures} (make {self.make_target})"

    @property
    def command(self) -> str:
        params = "".join(f" --param {k}={v}" for k, v in self.extra.items())
        return f"repro run --experiment {self.experiment} --quick{params}"

    def run(self) -> Numbers:
        data = get_experiment(self.experiment).run(RunParams(quick=True, extra=dict(self.extra)), lambda _: None)
        return self.numbers(data)


def serving_numbers(data: dict) -> Numbers:
    """Per group its max-throughput ratios (plateau, grid), each system's saturation and max throughput; per
    curve (system, seed) each point's rate and steady-state output tok/s, in rate order (the rates follow the
    saturation)."""
    out = {}
    for g in data["groups"]:
        where = (f"dataset {g['dataset_id']}" if "dataset_id" in g else f"trace {g['trace_id']}") + \
            f" {g['num_gpus']} GPUs"
        for key in ("max_tput_ratio", "grid_max_tput_ratio"):
            if key in g:
                out[f"{where}/{key}"] = g[key]
        for system, rate in g["saturation_per_s"].items():
            out[f"{where}/{system}/saturation_per_s"] = rate
        for system, per_seed in g.get("max_tput_tok_s", {}).items():
            for seed, tok_s in zip(g["seeds"], per_seed):
                out[f"{where}/{system}/seed{seed}/max_tput_tok_s"] = tok_s
        curves = {}
        for p in g["points"]:
            curves.setdefault((p["system"], p["seed"]), []).append(p)
        for (system, seed), points in curves.items():
            for i, p in enumerate(sorted(points, key=lambda p: p["rate_per_s"])):
                out[f"{where}/{system}/seed{seed}/point{i}/rate_per_s"] = p["rate_per_s"]
                out[f"{where}/{system}/seed{seed}/point{i}/steady_output_tok_s"] = p["steady_output_tok_s"]
    return out


def sensitivity_numbers(data: dict) -> Numbers:
    out = {}
    for r in data["rows"]:
        where = f"{r['input']}={r['value']}/trace {r['trace_id']} {r['num_gpus']} GPUs"
        for key in ("ratio", "probe_ratio"):
            if key in r:
                out[f"{where}/{key}"] = r[key]
        for system, per_seed in r["plateau_tok_s"].items():
            for seed, tok_s in zip(data["seeds"], per_seed):
                out[f"{where}/{system}/seed{seed}/plateau_tok_s"] = tok_s
    return out


def context_length_numbers(data: dict) -> Numbers:
    out = {}
    for row in data["settings"]:
        where = f"{row['model']} {row['num_gpus']} GPUs"
        for system, tokens in row["max_context"].items():
            out[f"{where}/{system}/max_context"] = tokens
        for p in row["points"]:
            out[f"{where}/{p['length']}/{p['system']}/decode_tok_s"] = p["decode_tok_s"]
    return out


def perf_model_numbers(data: dict) -> Numbers:
    out = {}
    for source in ("modelled", "simulated"):
        for row in data[source]:
            for role in ("debtor", "creditor", "aggregate"):
                out[f"k={row['k']}/{source}/{role}_tok_s"] = row[f"{role}_tok_s"]
    return out


def dgfm_numbers(data: dict) -> Numbers:
    out = {}
    for arm in data["arms"]:
        where = f"{arm['arm']}/seed{arm['seed']}"
        out[f"{where}/last_third_tok_s"] = last_third_tok_s(arm)
        out[f"{where}/num_finished"] = arm["num_finished"]
        out[f"{where}/num_moved_blocks"] = arm["num_moved_blocks"]
        out[f"{where}/swaps"] = arm["rounds"][-1]["swaps"] if arm["rounds"] else 0
        out[f"{where}/max_debt_cycles"] = max((r["debt_cycles"] for r in arm["rounds"]), default=0)
    return out


SERVING = {"seeds": "1", "workers": "1"}
CASES = (
    RegressionCase("e2e-10a-10b", "e2e", {**SERVING, "traces": "0,3", "short_requests": "100",
                                          "long_requests": "20"}, "fig10", serving_numbers),
    RegressionCase("e2e-datasets", "e2e-datasets", {**SERVING, "datasets": "1", "num_requests": "20"},
                   "fig8-distkv", serving_numbers),
    RegressionCase("sensitivity-link", "sensitivity", {"inputs": "link", "traces": "0,3", "short_requests": "100",
                                                       "long_requests": "20", "seeds": "1", "workers": "1"},
                   "sensitivity", sensitivity_numbers),
    RegressionCase("context-length", "context-length", {}, "fig9", context_length_numbers),
    RegressionCase("perf-model", "perf-model", {}, "fig7", perf_model_numbers),
    RegressionCase("dgfm", "dgfm", {}, "fig10-distkv", dgfm_numbers),
)
BY_NAME = {c.name: c for c in CASES}
