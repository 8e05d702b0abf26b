"""Hashes of simulated runs, for changes that must not move any simulated number (a faster event loop, a
reordered climb): the quick e2e and sensitivity runs (their data without wall_s, as `repro run --quick` writes
it; e2e's is a46de835... since 2026-11), every design on a small cluster, and Infinite-LLM and vLLM-M on a large
one. A run's hash covers every request's record and every step's end, tokens and instance (json, sort_keys: floats
by repr, so bit for bit). The committed hashes are repro/data/run_hashes.json; `repro regression hash --check` compares with them."""
import hashlib
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

HASHES_PATH = Path(__file__).resolve().parent.parent / "data" / "run_hashes.json"


def sha256_json(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()


def without_wall_s(obj):
    if isinstance(obj, dict):
        return {k: without_wall_s(v) for k, v in obj.items() if k != "wall_s"}
    if isinstance(obj, list | tuple):
        return [without_wall_s(v) for v in obj]
    return obj


def run_hash(run) -> str:
    """A ServingRun's hash: every field (records, step timeline, counters)."""
    return sha256_json(asdict(run))


@dataclass(frozen=True, slots=True)
class HashCase:
    name: str
    compute: Callable[[], str]


def _quick(experiment: str) -> Callable[[], str]:
    def compute() -> str:
        from repro.framework.base import RunParams
        from repro.framework.registry import get_experiment

        data = get_experiment(experiment).run(RunParams(quick=True, extra={"store": "off"}), lambda _: None)
        return sha256_json(without_wall_s(json.loads(json.dumps(data))))
    return compute


def _simulated(system: str, num_gpus: int, trace: int, num_requests: int, rate_per_gpu: float) -> Callable[[], str]:
    def compute() -> str:
        from reference_impl.systems.run import simulate
        from reference_impl.systems.registry import system_config
        from repro.benchmarks.scale import SEED, base_config
        from repro.experiments.e2e import _requests

        requests = _requests(trace, num_requests, "fitted", rate_per_gpu * num_gpus, SEED)
        return run_hash(simulate(system_config(system, base_config(num_gpus)), requests))
    return compute


def _cases() -> list[HashCase]:
    from reference_impl.systems.catalog import DESIGN_NAMES

    # e2e: the figures' curves; sensitivity: chunked prefill, links, peer-call costs and cores shared by instances
    cases = [HashCase("e2e-quick", _quick("e2e")), HashCase("sensitivity-quick", _quick("sensitivity"))]
    for system in DESIGN_NAMES:  # every design, past its saturation on a long and a short trace
        cases += [HashCase(f"{system}-trace3-8gpu", _simulated(system, 8, 3, 300, 1.0)),
                  HashCase(f"{system}-trace0-8gpu", _simulated(system, 8, 0, 400, 4.0))]
    for system in ("infinite-llm", "vllm-m"):  # the scale bench's setting, many instances
        cases.append(HashCase(f"{system}-trace0-128gpu", _simulated(system, 128, 0, 4000, 2.0)))
    return cases


CASES = _cases()
BY_NAME = {c.name: c for c in CASES}


def load_hashes() -> dict[str, str]:
    return json.loads(HASHES_PATH.read_text()) if HASHES_PATH.exists() else {}


def write_hashes(hashes: dict[str, str]) -> Path:
    HASHES_PATH.write_text(json.dumps(hashes, indent=1, sort_keys=True) + "\n")
    return HASHES_PATH
