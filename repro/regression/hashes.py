"""Fingerprints of simulated runs, for changes that must not move a number (a refactor, a speed-up): each design on a
small skewed workload, chunked prefill, a 32-GPU cluster, and the quick e2e result's points. A case's hash covers
every request's record, the step timeline and the run's counters, so any change of a simulated number changes it.
`repro regression hash` prints them; compare its output before and after a change."""
import hashlib
import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from workloads.request import Request


@dataclass(frozen=True, slots=True)
class HashCase:
    name: str
    design: str
    num_gpus: int = 4
    num_requests: int = 60
    rate_per_s: float = 6.0
    chunked_prefill_tokens: int | None = None
    num_blocks: int | None = 60  # 7,680 tokens an instance of 128-token rBlocks: memory-bound, pooling matters


CASES = (
    HashCase("infinite-llm", "infinite-llm"),
    HashCase("vllm-m", "vllm-m"),
    HashCase("vllm-s", "vllm-s"),
    HashCase("llumnix", "llumnix"),
    HashCase("loongserve", "loongserve"),
    HashCase("lamina", "lamina", num_blocks=None),
    HashCase("pd-disaggregation", "pd-disaggregation", num_blocks=None),
    HashCase("chunked-prefill", "infinite-llm", chunked_prefill_tokens=512),
    HashCase("scale-32", "infinite-llm", num_gpus=32, num_requests=400, rate_per_s=40.0),
)


def skewed_requests(num_requests: int, rate_per_s: float, seed: int = 0) -> list[Request]:
    """Prompts of 200-4,000 tokens, outputs mostly short (20-120) and a fifth long (800-2,000), Poisson arrivals."""
    rng = np.random.default_rng(seed)
    arrivals_s = np.cumsum(rng.exponential(1 / rate_per_s, num_requests)).tolist()
    out = []
    for i, arrival_s in enumerate(arrivals_s):
        output_len = int(rng.integers(800, 2000)) if rng.random() < 0.2 else int(rng.integers(20, 120))
        out.append(Request(i, arrival_s, int(rng.integers(200, 4000)), output_len, "skewed"))
    return out


def digest(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def run_case(case: HashCase) -> str:
    """The hash of `case`'s simulated run."""
    from reference_impl.systems.run import simulate
    from reference_impl.systems.registry import cluster, system_config

    base = cluster("llama2-7b", "A100-80GB-SXM", case.num_gpus, num_blocks=case.num_blocks)
    base = replace(base, engine=replace(base.engine, chunked_prefill_tokens=case.chunked_prefill_tokens))
    result = simulate(system_config(case.design, base), skewed_requests(case.num_requests, case.rate_per_s))
    return digest({**asdict(result), "summary": result.summary()})


def e2e_points_hash(result_path: Path) -> str:
    """The hash of a result.json's data with every point's wall_s left out (the quick e2e run's is a46de835...)."""
    data = json.loads(Path(result_path).read_text())["data"]
    for group in data.get("groups", []):
        for point in group.get("points", []):
            point.pop("wall_s", None)
    return digest(data)
