"""`repro report`'s simulator-accuracy lines: the simulator against measured runs, from saved results only
(sim-vs-real on this project's CPU, `repro validate-gpu` on a GPU)."""
import json
from pathlib import Path


def _row(metric: str, value: float | None, unit: str, note: str) -> dict:
    return {"claim_id": "simulator-accuracy", "figure": "", "metric": metric, "paper": "", "reproduced": value,
            "unit": unit, "verdict": "measured", "note": note}


def _sim_vs_real(path: Path) -> list[dict]:
    data = json.loads(path.read_text())["data"]
    rows = []
    arms = [("local", data.get("errors") or {})]
    if isinstance(data.get("pooled_arm"), dict):
        arms.append(("pooled Ray", data["pooled_arm"].get("errors") or {}))
    designs = {label: data[key] for key, label in (("lamina_arm", "Lamina Ray"), ("pd_arm", "pd Ray"),
                                                     ("llumnix_arm", "Llumnix Ray"),
                                                     ("loongserve_arm", "LoongServe Ray"))
               if isinstance(data.get(key), dict)}  # arms of two designs on the same Ray instances
    arms += [(label, arm.get("errors") or {}) for label, arm in designs.items()]
    where = f"{path.parent.name}, {data['machine']['device']}"
    for arm, errors in arms:
        for system, metrics in sorted(errors.items()):
            for metric, label in (("output_tok_s", "out tok/s"), ("mean_ttft_s", "TTFT")):
                err = metrics.get(metric)
                if err and (metric == "output_tok_s" or arm in designs):
                    rows.append(_row(f"sim-vs-real {arm} {system}: {label} median |err|",
                                     100 * err["median_abs_rel_err"], "%",
                                     f"{where}: {err['num_points']} points, worst "
                                     f"{100 * err['worst_abs_rel_err']:.1f}% at {err['worst_rate_per_s']:g} req/s"))
    for arm, design_arm in designs.items():
        rank = design_arm.get("ranking")
        for metric, label in (("output_tok_s", "max out tok/s"), ("mean_ttft_s", "median TTFT")) if rank else ():
            rows.append(_row(f"sim-vs-real {arm}: designs ranked by {label} as measured (1 yes, 0 no)",
                             float(rank["same"][metric]), "",
                             f"{where}: measured {' > '.join(rank['measured'][metric])}, predicted "
                             f"{' > '.join(rank['predicted'][metric])} (best first)"))
    return rows


def _validate_gpu(path: Path) -> list[dict]:
    doc = json.loads(path.read_text())
    if doc.get("mode") != "gpu":
        return []
    where = f"{path.parent.name}, {doc['device']['name']}, {doc['date'][:10]}"
    rows = []
    serving = doc["parts"].get("serving", {}).get("result")
    if serving:
        med = serving["median_abs_error"]
        rows.append(_row(f"GPU serving, committed {serving['committed'].split(' on ')[1]} model: out tok/s median |err|",
                         100 * med["committed"]["output_tok_s"], "%",
                         f"{where}: profiled on the spot {100 * med['on_the_spot']['output_tok_s']:.1f}%; "
                         f"{len(serving['points'])} rates, {serving['model']}"))
    steps = doc["parts"].get("steps", {}).get("result")
    if steps:
        h = steps["headline"]
        rows.append(_row("GPU engine decode step / committed model (median)", h["decode_median_ratio"], "x",
                         f"{where}: prefill {h['prefill_median_ratio']:.2f}x; {steps['model']}"))
    return rows


def accuracy_rows(results_dir: str) -> list[dict]:
    """One row per system and arm of each sim-vs-real result, and two per GPU validation run."""
    root = Path(results_dir)
    rows = []
    for path in sorted(root.glob("sim-vs-real/*/result.json")):
        rows += _sim_vs_real(path)
    for path in sorted(root.glob("validate-gpu/*/result.json")):
        rows += _validate_gpu(path)
    return rows
