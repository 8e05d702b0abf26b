"""Runs the parts of `repro validate-gpu`, each in its own process under its own time budget: a part that fails
or runs out of time is recorded and the rest still run. Writes result.json, summary.md and figure.png."""
import datetime
import importlib.util
import json
import os
import platform
import subprocess
import sys
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from repro.validate_gpu.report import draw_figure, summary_markdown
from repro.validate_gpu.sizes import DEADLINE_ENV, PARTS, Sizes

FORMAT = "validate-gpu/1"
NEEDED = {"torch": "torch", "numpy": "numpy", "click": "click", "triton": "triton", "transformers": "transformers"}
OPTIONAL = {"jsonschema": "the result is not schema-validated", "matplotlib": "no figure is drawn"}
LOG_TAIL_CHARS = 1500


def missing_packages() -> list[str]:
    return [pip for module, pip in NEEDED.items() if importlib.util.find_spec(module) is None]


def _versions() -> dict:
    out = {"python": platform.python_version()}
    for name in ("torch", "triton", "transformers", "numpy"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return out


def device_record(device: str) -> dict:
    import torch

    if device.startswith("cuda"):
        props = torch.cuda.get_device_properties(torch.device(device))
        return {"device": device, "name": props.name, "memory_gib": props.total_memory / 2**30,
                "multiprocessors": props.multi_processor_count, "cuda": torch.version.cuda}
    return {"device": device, "name": platform.processor() or platform.machine(), "cpu_count": os.cpu_count()}


def run_part(name: str, sizes: Sizes, device: str, folder: Path) -> dict:
    out, log = folder / f"{name}.json", folder / f"{name}.log"
    budget = sizes.budgets_s[name]
    cmd = [sys.executable, "-m", "repro.validate_gpu.part", name, sizes.name, device, str(out)]
    start = time.perf_counter()
    env = {**os.environ, "PYTHONUNBUFFERED": "1", DEADLINE_ENV: str(time.time() + budget)}
    with open(log, "w") as log_file:
        try:
            code = subprocess.run(cmd, stdout=log_file, stderr=subprocess.STDOUT, timeout=budget, env=env).returncode
            status = "ok" if code == 0 else "crashed"
        except subprocess.TimeoutExpired:
            status = "timeout"
    record = {"status": status, "budget_s": budget, "wall_s": time.perf_counter() - start}
    if status == "ok":
        record["result"] = json.loads(out.read_text())
        if not record["result"].get("passed", False):
            record["status"] = "failed"
    else:
        record["error"] = log.read_text()[-LOG_TAIL_CHARS:]
    return record


def run_all(out: Path, sizes: Sizes, device: str, parts=PARTS, echo=print) -> dict:
    folder = out / "parts"
    folder.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    doc = {"format": FORMAT, "mode": sizes.name, "date": datetime.datetime.now(datetime.timezone.utc).isoformat(
        timespec="seconds"), "device": device_record(device), "versions": _versions(),
           "command": " ".join(["repro validate-gpu", *sys.argv[2:]]), "parts": {}}
    for name in parts:
        echo(f"validate-gpu: {name} (budget {sizes.budgets_s[name]} s) ...")
        doc["parts"][name] = run_part(name, sizes, device, folder)
        echo(f"validate-gpu: {name} {doc['parts'][name]['status']} in {doc['parts'][name]['wall_s']:.1f} s")
    doc["total_wall_s"] = time.perf_counter() - start
    doc["passed"] = all(p["status"] == "ok" for p in doc["parts"].values())
    doc["notes"] = [f"{module} missing: {why}" for module, why in OPTIONAL.items()
                    if importlib.util.find_spec(module) is None]
    _validate(doc)
    if importlib.util.find_spec("matplotlib") is not None:
        draw_figure(doc, out / "figure.png")
    (out / "summary.md").write_text(summary_markdown(doc))
    tmp = out / "result.json.tmp"
    tmp.write_text(json.dumps(doc, indent=1))
    os.replace(tmp, out / "result.json")
    return doc


def _validate(doc: dict) -> None:
    if importlib.util.find_spec("jsonschema") is None:
        return
    import jsonschema

    schema = json.loads((Path(__file__).parent / "schema.json").read_text())
    jsonschema.validate(doc, schema)
