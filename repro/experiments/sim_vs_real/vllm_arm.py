"""sim-vs-real's second measured system: real vLLM (baselines/real_vllm/runner.py in .venv-vllm) against the simulator's
vLLM-M policy, calibrated from vLLM's own steps on this machine.

The same model shape with the same random weights (written as a Hugging Face folder), the same requests and rates
as the local arm. Clock: the wall clock. vLLM runs its engine core (and on CPU a worker) in processes of its own,
so this process's CPU time says nothing about it; its OpenMP threads are pinned to the first `threads` cores
(VLLM_CPU_OMP_THREADS_BIND), the run repeats, and the load average is kept before and after every repeat.
A repeat is one vLLM job: start the engine, time its steps over a grid (baselines/real_vllm/profile.py), measure its
burst saturation, serve every rate. Its calibration is this machine's op-level profile on the wall clock (taken
just before the job) with vLLM's KV read rate and step overhead fitted to those steps
(calibration/engine_steps.py). The simulator runs one vLLM-M instance (pooling off) with vLLM's block size, KV
blocks, batch cap and token budget per step: vLLM's V1 scheduler decodes every running request and prefills prompt
chunks in one step, up to max_num_batched_tokens (the simulator's chunked prefill).
"""
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch

from baselines.real_vllm.backend import check_vllm, random_prompts, requests_of, run_vllm_rounds, vllm_python
from baselines.real_vllm.config import VllmSetup, engine_env, engine_kwargs
from baselines.real_vllm.dispatch import blocks_for
from baselines.real_vllm.model import save_hf_folder
from baselines.real_vllm.profile import StepGrid, grid_rounds, grid_steps
from reference_impl.calibration.coefficients import dumps
from reference_impl.calibration.engine_steps import fit_engine_steps
from reference_impl.errors import InputError
from reference_impl.model.llama import random_model
from reference_impl.profiling.local import ProfilePlan, profile
from reference_impl.serving.records import RequestRecord, ServingRun
from reference_impl.sim.config import SimConfig, sim_engine
from reference_impl.systems.run import simulate
from reference_impl.systems.registry import system_config
from repro.experiments.sim_vs_real.points import run_summary
from repro.load import load_1m

SYSTEM = "vllm-m"
HARDWARE = "cpu-vllm"  # the calibration's hardware name: this machine, as vLLM runs on it
BLOCK_SIZE = 32  # vLLM 0.32's CPU attention takes multiples of 32


def vllm_unavailable() -> str | None:
    """Why real vLLM cannot run here (one line), or None where it can."""
    try:
        check_vllm(vllm_python())
    except InputError as exc:
        return str(exc)
    return None



def _grid(requests, max_batch: int, max_tokens: int, budget: int, quick: bool):
    prompts = sorted(r.prompt_len for r in requests)
    prompt_len = prompts[len(prompts) // 2]
    steps = 6 if quick else 10
    context = max(1, min(max_tokens - steps - 2,
                         int(np.mean([r.prompt_len + r.output_len / 2 for r in requests]))))
    kv_contexts = tuple(sorted({max(1, context // 4), context, max(1, max_tokens - steps - 2)}))
    # every batch size a serving step can have is near a measured one: the overhead is interpolated between them
    batches = {b for b in (1, 2, 4, 8, 16, 24, 32, 48, 64) if b < max_batch} | {max_batch}
    counts = {k for k in (1, 2, 4, 8, 16, 32) if k < max_batch and k * prompt_len <= budget}
    return StepGrid(decode_batches=tuple(sorted(batches)), context_len=context, kv_batch=max_batch,
                    kv_context_lens=kv_contexts, decode_steps=steps,
                    prefill_prompts=tuple(sorted(counts | {max(1, min(max_batch, budget // prompt_len))})),
                    prompt_len=prompt_len, prefill_repeats=3 if quick else 5)


def _ops_profile(spec, grid, budget: int, seed: int, quick: bool) -> dict:
    """This machine's op-level profile on the wall clock (our engine's step overhead in it is replaced later)."""
    prefill = {k * grid.prompt_len for k in grid.prefill_prompts}
    plan = ProfilePlan(tokens=tuple(sorted({*grid.decode_batches, *prefill, 256, 1024, budget})),
                       kv_lens=(256, 1024), copy_bytes=(1 << 12, 1 << 20), prefill_tokens=grid.prompt_len,
                       repeats=5 if quick else 7, clock="wall", overhead_batches=(1,), overhead_prefill_seqs=(1,),
                       overhead_prompt_len=grid.prompt_len, overhead_context_tokens=grid.context_len)
    return profile(spec, name=HARDWARE, device=torch.device("cpu"), dtype=torch.float32, quick=False, seed=seed,
                   plan=plan)


def measured_result(run):
    """A real vLLM run as a ServingRun, as the simulator's, so both sides are summarised by one path."""
    records = [RequestRecord(r.req_id, r.arrival_s, r.prompt_len, r.output_len,
                             -1 if r.engine is None else r.engine, r.status, r.first_token_s, r.finish_s)
               for r in run.served]
    return ServingRun(records, list(run.step_end_s), list(run.step_tokens), num_steps=len(run.step_end_s),
                      end_s=run.run_s)


def steps_to_first_token(result) -> float | None:
    """Median, over requests that arrived while another was decoding, of the steps that ended after the arrival
    up to the request's first token (its own step included): 2 where a request joins the step after the one in
    flight. Where vLLM runs ahead of the runner's loop, which adds arrivals between its steps, it is 3."""
    ends = np.asarray(result.step_end_s)
    done = result.finished
    counts = [int(np.sum((ends > r.arrival_s) & (ends <= r.first_token_s + 1e-9))) for r in done
              if any(o is not r and o.first_token_s < r.arrival_s < o.finish_s for o in done)]
    return float(np.median(counts)) if counts else None


def run_arm(spec, make_requests, rates, *, max_batch: int, max_tokens: int, repeats: int, threads: int, seed: int,
            quick: bool, folder: Path, record, log) -> dict:
    """Every repeat of every rate on real vLLM and in the simulator; {"runs", "calibrations", "info"}.
    `make_requests(rate)`: the workload at a rate (inf: all at once); `record(path, load)`: a calibration's
    summary record."""
    blocks = max_batch * blocks_for(max_tokens, BLOCK_SIZE)  # every running request fits: no preemption
    setup = VllmSetup(SYSTEM, 1, block_size=BLOCK_SIZE, blocks_per_engine=blocks,
                      max_model_len=blocks_for(max_tokens, BLOCK_SIZE) * BLOCK_SIZE, max_num_seqs=max_batch,
                      cpu_threads=threads, seed=seed)
    (kwargs,) = engine_kwargs(setup, "")
    budget = kwargs["max_num_batched_tokens"]
    burst = make_requests(float("inf"))
    grid = _grid(burst, max_batch, max_tokens, budget, quick)
    model = random_model(spec, seed, torch.float32)
    hf = save_hf_folder(model, Path(folder) / "vllm-hf")
    rng = np.random.default_rng(seed)
    prompts = random_prompts([r.prompt_len for r in burst], spec.vocab_size, rng)  # the same prompts at every rate

    def job_round(requests):
        return requests_of([prompts[r.req_id] for r in requests], [r.output_len for r in requests],
                           [r.arrival_s if np.isfinite(r.arrival_s) else 0.0 for r in requests])

    workloads = [make_requests(rate) for rate in rates]
    runs, calibrations, jobs = [], [], []
    for repeat in range(repeats):
        ops = _ops_profile(spec, grid, budget, seed + repeat, quick)
        calib = grid_rounds(grid, spec.vocab_size, rng)
        rounds = [job_round(burst[: min(4, len(burst))]), *calib, job_round(burst), *map(job_round, workloads)]
        load_before = load_1m()
        done = run_vllm_rounds(setup, hf, rounds, log_path=str(Path(folder) / f"vllm-{repeat}.log"))
        load_after = load_1m()
        decode, prefill = grid_steps(grid, done[1:1 + len(calib)], BLOCK_SIZE)
        doc = fit_engine_steps(ops, HARDWARE, spec.name, decode, prefill, kv_batch=grid.kv_batch,
                               engine=f"vLLM {done[0].vllm_version}",
                               source=f"real vLLM {done[0].vllm_version} steps on this machine (wall clock)")
        path = Path(folder) / f"vllm-calibration-{repeat}.json"
        path.write_text(dumps(doc))
        overhead = doc["hardware"][HARDWARE]["step_overhead_s"][spec.name]
        calibrations.append({"system": SYSTEM, "repeat": repeat, "rate_per_s": None, **record(path, load_after),
                             "num_decode_steps": len(decode), "num_prefill_steps": len(prefill),
                             **{f"step_minus_layers_{kind}_s": {"x": overhead[kind]["at_x"],
                                                                "y": overhead[kind]["step_minus_layers_s"]}
                                for kind in ("decode", "prefill")}})
        saturation = run_summary(measured_result(done[1 + len(calib)]))
        jobs.append({"repeat": repeat, "vllm_version": done[0].vllm_version, "startup_s": done[0].startup_s,
                     "loadavg_1m_before": load_before, "loadavg_1m_after": load_after,
                     "saturation_output_tok_s": saturation.output_tok_s,
                     "saturation_rate_per_s": saturation.num_finished / saturation.makespan_s})
        log(f"  vLLM repeat {repeat}: started in {done[0].startup_s:.0f} s, burst {saturation.output_tok_s:.1f} out "
            f"tok/s, {len(decode)} decode and {len(prefill)} prefill steps timed; load {load_before} -> {load_after}")
        sim_config = system_config(SYSTEM, SimConfig(
            model=spec.name, gpu=HARDWARE, link="intra-node", num_blocks=blocks, coefficients_path=str(path),
            engine=sim_engine(num_instances=1, block_size=BLOCK_SIZE, max_batch_size=max_batch,
                              chunked_prefill_tokens=budget, seed=seed)))
        for rate, requests, real in zip(rates, workloads, done[2 + len(calib):]):
            real, sim = measured_result(real), simulate(sim_config, requests)
            measured, predicted = run_summary(real), run_summary(sim)
            runs.append({"system": SYSTEM, "repeat": repeat, "rate_per_s": rate, "measured": asdict(measured),
                         "predicted": asdict(predicted), "loadavg_1m_before": load_before,
                         "loadavg_1m_after": load_after,
                         "steps_to_first_token_busy": {"measured": steps_to_first_token(real),
                                                       "predicted": steps_to_first_token(sim)}})
            log(f"  vLLM repeat {repeat} rate {rate:g}/s: measured {measured.output_tok_s:.1f} tok/s, predicted "
                f"{predicted.output_tok_s:.1f}")
    info = {"clock": "wall", "omp_threads_bind": engine_env(setup).get("VLLM_CPU_OMP_THREADS_BIND"),
            "block_size": BLOCK_SIZE, "num_blocks": blocks, "max_model_len": setup.max_model_len,
            "max_num_batched_tokens": budget, "calibration_grid": asdict(grid), "jobs": jobs,
            "saturation_output_tok_s": float(np.median([j["saturation_output_tok_s"] for j in jobs])),
            "saturation_rate_per_s": float(np.median([j["saturation_rate_per_s"] for j in jobs]))}
    return {"runs": runs, "calibrations": calibrations, "info": info}
