"""The e2e comparison (infinite-llm Fig 10a) on real engines at CPU scale: `repro run --experiment e2e --backend vllm`.

Infinite-LLM is our engine on the local backend (N instances in this process, KV pooling on); vLLM-M is N real
vLLM engines with most-free-memory dispatch. Both get the same requests at each rate (trace lengths clipped so a
tiny model on a CPU finishes in minutes), the same usable KV blocks per instance and block size, and one CPU
thread per system. vLLM's engines start once and serve every rate in turn. The output is the serving
experiments' data (repro/schemas/serving.schema.json), so plots and reports read it like a simulated run.
"""
import tempfile
from dataclasses import dataclass, replace

import numpy as np
import torch

from baselines.real_vllm.backend import check_vllm, random_prompts, requests_of, run_vllm_rounds, vllm_python
from baselines.real_vllm.compare import serve_local
from baselines.real_vllm.config import VllmSetup
from baselines.real_vllm.metrics import serving_point, summarize
from baselines.real_vllm.model import TINY_VLLM, resolve_for_vllm, save_hf_folder
from reference_impl.control.engine import EngineConfig
from reference_impl.errors import InputError
from reference_impl.serving.points import best_ratio
from workloads import SourceOptions, generate


@dataclass(frozen=True, slots=True)
class RealE2EConfig:
    trace_ids: tuple[int, ...] = (0, 1, 2)
    num_instances: int = 2
    num_requests: int = 24
    rates_per_s: tuple[float, ...] = (1.0, 2.0, 4.0, 8.0)
    max_prompt_len: int = 256
    max_output_len: int = 64
    blocks_per_instance: int = 16  # usable KV blocks of each instance / engine (512 tokens): memory is tight
    block_size: int = 32  # vLLM 0.32's CPU attention takes multiples of 32
    cpu_threads: int = 1
    seed: int = 0

    def __post_init__(self):
        if len(self.rates_per_s) < 2 or min(self.rates_per_s) <= 0:
            raise InputError("give at least two request rates, all > 0")
        if (self.max_prompt_len + self.max_output_len) > self.blocks_per_instance * self.block_size:
            raise InputError(f"a request of {self.max_prompt_len} + {self.max_output_len} tokens would not fit one "
                             f"instance of {self.blocks_per_instance} blocks of {self.block_size}")


QUICK = RealE2EConfig(trace_ids=(2,), num_requests=6, rates_per_s=(2.0, 8.0), max_prompt_len=96, max_output_len=16,
                      blocks_per_instance=6)


def config_from_params(params) -> RealE2EConfig:
    """QUICK or the default, with --param num_requests=, rates=1,2,4, traces=0,2, instances= overrides."""
    base = replace(QUICK if params.quick else RealE2EConfig(), seed=params.seed)
    extra = dict(params.extra)
    casts = {"num_requests": ("num_requests", int), "instances": ("num_instances", int),
             "rates": ("rates_per_s", lambda v: tuple(float(x) for x in v.split(","))),
             "traces": ("trace_ids", lambda v: tuple(int(x) for x in v.split(",")))}
    changes = {}
    for key, (field, cast) in casts.items():
        if key in extra:
            try:
                changes[field] = cast(extra.pop(key))
            except ValueError:
                raise InputError(f"--param {key}: not a valid value for {field}") from None
    if extra:
        raise InputError(f"unknown --param for the real-engine e2e: {', '.join(sorted(extra))}")
    return replace(base, **changes)


def trace_requests(config: RealE2EConfig, trace_id: int, rate_per_s: float, vocab_size: int):
    """(prompts, max tokens, arrivals) of one trace at one rate: the same lengths and prompts at every rate."""
    reqs = generate(trace_id=trace_id, num_requests=config.num_requests, rate_per_s=rate_per_s, seed=config.seed,
                    options=SourceOptions(source="fitted"))
    prompts = random_prompts([min(r.prompt_len, config.max_prompt_len) for r in reqs], vocab_size,
                             np.random.default_rng(config.seed + trace_id))
    return prompts, [min(r.output_len, config.max_output_len) for r in reqs], [r.arrival_s for r in reqs]


def run_group(config: RealE2EConfig, trace_id: int, model, folder, log) -> dict:
    workloads = [trace_requests(config, trace_id, rate, model.config.vocab_size) for rate in config.rates_per_s]
    setup = VllmSetup("vllm-m", config.num_instances, block_size=config.block_size,
                      blocks_per_engine=config.blocks_per_instance,
                      max_model_len=config.max_prompt_len + config.max_output_len, seed=config.seed)
    vllm_runs = run_vllm_rounds(setup, folder, [requests_of(*w) for w in workloads])
    engine_config = EngineConfig(config.num_instances, config.blocks_per_instance, block_size=config.block_size,
                                 seed=config.seed)
    points = []
    for rate, (prompts, max_tokens, arrivals_s), vrun in zip(config.rates_per_s, workloads, vllm_runs):
        threads = torch.get_num_threads()
        torch.set_num_threads(config.cpu_threads)
        try:
            local = serve_local(model, prompts, max_tokens, engine_config, arrivals_s)
        finally:
            torch.set_num_threads(threads)
        ours = serving_point("infinite-llm", rate, summarize(local.served, local.step_end_s, local.step_tokens),
                             local.run_s)
        theirs = serving_point("vllm-m", rate, vrun.summary(), vrun.run_s)
        for p in (ours, theirs):
            log(f"  trace {trace_id} {p['system']:<13} rate {rate:6.2f}/s  {p['output_tok_s']:8.1f} out tok/s  "
                f"finished {p['num_finished']}/{p['num_requests']}  ({p['wall_s']:.1f} s)")
        points += [ours, theirs]
    return {"trace_id": trace_id, "panel": "real-cpu", "model": "tiny-h32", "num_gpus": config.num_instances,
            "num_instances": config.num_instances, "tp": 1, "baseline": "vllm-m",
            "num_requests": config.num_requests, "rates_per_s": list(config.rates_per_s), "points": points,
            "max_tput_ratio": best_ratio(points, "infinite-llm", "vllm-m")}


def run(params, log) -> dict:
    """Data of the serving schema for real engines on this machine (the 'gpu' field names the CPU run)."""
    config = config_from_params(params)
    check_vllm(vllm_python())  # one line on how to install it, before any work
    model = resolve_for_vllm("tiny", seed=config.seed)
    log(f"real engines: {config.num_instances} instances, tiny model with {TINY_VLLM.num_heads} heads, "
        f"rates {list(config.rates_per_s)}/s, {config.num_requests} requests per trace")
    with tempfile.TemporaryDirectory(prefix="e2e-vllm-") as scratch:
        folder = save_hf_folder(model, f"{scratch}/tiny-hf")
        groups = [run_group(config, t, model, folder, log) for t in config.trace_ids]
    return {"gpu": "cpu", "link": "in-process", "source": "fitted", "groups": groups}
