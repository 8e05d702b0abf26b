"""sim-vs-real: is the simulator a prediction of a real run? (issue 16; DESIGN "Serving measurements")

One workload (a trace of infinite-llm Table 1, lengths scaled so the longest request has `max_tokens`) is served
on the real local engine (`backends/local.py`, one instance, the wall clock, `backends/clock.py`) at rates from
light load to past saturation; the saturation rate is measured first, by serving every request at once. Then the
simulator (`sim/`, the same control plane) runs exactly those requests with the cost model calibrated
on this machine just before: `repro profile`'s measurements, the engine's per-step overhead outside its layers
included (calibration/profile_overhead.py), measured again just before each run, so that a prediction and its
measurement see about the same load on the shared machine; a point is the median of repeats, the measured spread is kept, and the
error is the predicted median against the measured median. Real vLLM is a second measured system where
`.venv-vllm` exists (repro/experiments/sim_vs_real/vllm_arm.py: against the simulator's vLLM-M policy, on the wall clock);
elsewhere, or with --param vllm=off, it is recorded as skipped. The pooled arm (repro/experiments/sim_vs_real/pooled.py) serves
a trace scaled so its long requests outgrow one instance on several Ray instances, Infinite-LLM (KV pooled) against
vLLM-M, and simulates the same with the machine's gloo link measured beside the profile; where Ray or the cores are
missing, or with --param pooled=off, it is recorded as skipped. The Lamina arm
(repro/experiments/sim_vs_real/lamina_arm.py) serves the local arm's requests with Lamina's offloading (one compute
and one memory Ray instance) and with Infinite-LLM on the same two, and simulates both (--param lamina=off: skipped).
The pd, Llumnix and LoongServe arms (pd_arm.py, llumnix_arm.py, loongserve_arm.py) do the same with prefill/decode
disaggregation, Llumnix's migration and LoongServe's sequence-parallel prefill; they run in full runs, with --quick
only when asked (--param pd=on, llumnix=on, loongserve=on).
"""
import os
import tempfile
from dataclasses import asdict
from pathlib import Path

import torch

from reference_impl.backends.clock import CLOCKS
from reference_impl.backends.local import serve
from reference_impl.calibration.specs import model_spec
from reference_impl.control.engine import EngineConfig
from reference_impl.control.sequence import num_blocks_for
from reference_impl.errors import InputError
from reference_impl.model.llama import random_model
from reference_impl.sim.config import SimConfig, sim_engine
from reference_impl.systems.run import simulate
from repro.framework.base import Experiment, RunParams, default_run_id
from repro.framework.params import Param, float_list
from repro.load import load_1m
from repro.experiments.sim_vs_real.calibration import calibrate, calibration_record
from repro.experiments.sim_vs_real.figure import plot
from repro.experiments.sim_vs_real.points import error_table, make_points, run_summary
from repro.experiments.sim_vs_real.vllm_arm import run_arm, vllm_unavailable
from repro.progress import progress
from repro.serving.tasks import workload
from workloads.scaling import max_tokens_for, scale_factor, scale_requests, scale_to_longest

SYSTEM = "infinite-llm"  # the local engine: one instance, so no pooling partner (vLLM-M behaves the same)
# rates as multiples of the measured saturation rate: light load to well past it (the saturation measurement moves
# with the load other work puts on a shared machine)
QUICK = dict(num_requests=16, repeats=1, max_tokens=96, multipliers=(0.3, 0.6, 1.2, 2.4),
             pooled_requests=60, pooled_multipliers=(0.4, 1.6), lamina_multipliers=(0.4, 1.6), pd_multipliers=(0.4, 1.6),
             llumnix_multipliers=(0.4, 1.6), loongserve_multipliers=(0.4, 1.6))
FULL = dict(num_requests=32, repeats=3, max_tokens=128, multipliers=(0.25, 0.5, 1.0, 2.0, 4.0),
            pooled_requests=200, pooled_multipliers=(0.2, 0.4, 0.7, 1.0, 1.5, 3.0),
            lamina_multipliers=(0.25, 0.5, 1.0, 2.0), pd_multipliers=(0.25, 0.5, 1.0, 2.0),
            llumnix_multipliers=(0.25, 0.5, 1.0, 2.0), loongserve_multipliers=(0.25, 0.5, 1.0, 2.0))
PARAMS = (
    Param("trace", int, 1, "infinite-llm Table 1 trace whose request lengths are served (scaled)"),
    Param("num_requests", int, None, "requests per point (default 32; 16 with --quick)"),
    Param("repeats", int, None, "measured repeats of every rate (default 3; 1 with --quick)"),
    Param("max_tokens", int, None, "prompt + output of the longest request after scaling (default 128; 96 quick)"),
    Param("rates", float_list, None, "request rates per second (default: fractions of the measured saturation)"),
    Param("max_batch_size", int, 32, "the engine's batch cap (the simulator's too)"),
    Param("model", str, "llama-tiny", "model of calibration/specs.json whose shape the engine runs (random weights)"),
    Param("device", str, "cpu", "torch device of the engine and the calibration"),
    Param("threads", int, 1, "torch CPU threads (pinned: a 2-core machine shared with other work)"),
    Param("clock", str, "cpu", "what the real runs and the calibration are timed with: the wall clock, or this "
          "process's CPU time with idle time skipped (a shared CPU; a GPU device always uses the wall clock)",
          choices=CLOCKS),
    Param("vllm", str, "auto", "real vLLM as a second measured system: where .venv-vllm exists (auto), or not",
          choices=("auto", "off")),
    Param("pooled", str, "auto", "the pooled arm: Infinite-LLM and vLLM-M on Ray instances, a core each, where Ray "
          "and the cores exist (auto), or not", choices=("auto", "off")),
    Param("lamina", str, "auto", "the Lamina arm: Lamina (1 compute + 1 memory Ray instance) and Infinite-LLM on 2 "
          "Ray instances, the local arm's requests, where Ray and 2 cores exist (auto), or not",
          choices=("auto", "off")),
    Param("lamina_rates", float_list, None, "the Lamina arm's rates per second (default: fractions of its measured "
          "saturation)"),
    Param("pd", str, "auto", "the pd arm: prefill/decode disaggregation (1 prefill + 1 decode Ray instance) and "
          "Infinite-LLM on the same 2, the local arm's requests, where Ray and 2 cores exist (auto: full runs "
          "only, keeping --quick short; on: --quick too), or not", choices=("auto", "on", "off")),
    Param("pd_rates", float_list, None, "the pd arm's rates per second (default: fractions of its measured "
          "saturation)"),
    Param("llumnix", str, "auto", "the Llumnix arm: Llumnix (live migration between 2 Ray instances) and "
          "Infinite-LLM on the same 2, the local arm's requests, where Ray and 2 cores exist (auto: full runs "
          "only, keeping --quick short; on: --quick too), or not", choices=("auto", "on", "off")),
    Param("llumnix_rates", float_list, None, "the Llumnix arm's rates per second (default: fractions of its "
          "measured saturation)"),
    Param("loongserve", str, "auto", "the LoongServe arm: LoongServe (sequence-parallel prefill over 2 Ray "
          "instances, multi-master decode) and Infinite-LLM on the same 2, the local arm's requests, where Ray and 2 "
          "cores exist (auto: full runs only, keeping --quick short; on: --quick too), or not",
          choices=("auto", "on", "off")),
    Param("loongserve_rates", float_list, None, "the LoongServe arm's rates per second (default: fractions of its "
          "measured saturation)"),
    Param("pooled_instances", int, 2, "instances of the pooled arm"),
    Param("pooled_requests", int, None, "requests per point of the pooled arm (default 200; 60 with --quick)"),
    Param("pooled_rates", float_list, None, "the pooled arm's rates per second (default: fractions of its measured "
          "saturation)"),
    Param("instance_tokens", int, 256, "KV tokens one instance of the pooled arm holds; the trace's long_quantile "
          "length is scaled to it"),
    Param("long_quantile", float, 0.98, "the trace's length quantile that fills one instance (the pooled arm's "
          "scaling rule, workloads/scaling.py)"),
)
BLOCK_SIZE = 16
POOLED_BLOCK_SIZE = 8


def _requests(trace: int, num_requests: int, rate_per_s: float, max_tokens: int, seed: int):
    return scale_to_longest(workload(trace_id=trace, num_requests=num_requests, rate_per_s=rate_per_s, seed=seed,
                                     source="fitted"), max_tokens)


def _check(**values) -> None:
    for name, value in values.items():
        if value < 1:
            raise InputError(f"--param {name} must be at least 1 (got {value})")


def _check_pooled(extra: dict) -> None:
    if extra["pooled_instances"] < 2:
        raise InputError(f"--param pooled_instances must be at least 2: pooling needs a peer "
                         f"(got {extra['pooled_instances']})")
    if extra["instance_tokens"] < 2 * POOLED_BLOCK_SIZE:
        raise InputError(f"--param instance_tokens must be at least {2 * POOLED_BLOCK_SIZE}, two rBlocks "
                         f"(got {extra['instance_tokens']})")
    if not 0 < extra["long_quantile"] < 1:
        raise InputError(f"--param long_quantile must be between 0 and 1 (got {extra['long_quantile']})")
    if extra.get("pooled_requests") is not None:
        _check(pooled_requests=extra["pooled_requests"])


def device_is_cpu(device: str) -> bool:
    return torch.device(device).type == "cpu"



def run(params: RunParams, log) -> dict:
    size = QUICK if params.quick else FULL
    extra = params.extra
    num_requests = extra.get("num_requests", size["num_requests"])
    repeats = extra.get("repeats", size["repeats"])
    max_tokens = extra.get("max_tokens", size["max_tokens"])
    max_batch = extra["max_batch_size"]
    _check(num_requests=num_requests, repeats=repeats, max_batch_size=max_batch, threads=extra["threads"])
    _check_pooled(extra)
    if max_tokens < 2:
        raise InputError(f"--param max_tokens must be at least 2, a prompt token and an output token (got {max_tokens})")
    try:
        torch.empty(1, device=extra["device"])
    except (RuntimeError, AssertionError) as exc:
        raise InputError(f"--param device={extra['device']!r} cannot be used: {str(exc).splitlines()[0]}") from None
    clock = extra["clock"] if device_is_cpu(extra["device"]) else "wall"
    device = torch.device(extra["device"])
    threads_before = torch.get_num_threads()
    torch.set_num_threads(extra["threads"])
    spec = model_spec(extra["model"])
    dtype = torch.float32 if device.type == "cpu" else torch.float16
    model = random_model(spec, params.seed, dtype, device)
    num_blocks = max_batch * num_blocks_for(max_tokens, BLOCK_SIZE) + 1  # every running request fits: no preemption
    engine_config = EngineConfig(1, num_blocks, block_size=BLOCK_SIZE, max_batch_size=max_batch, seed=params.seed)
    make = lambda rate: _requests(extra["trace"], num_requests, rate, max_tokens, params.seed)  # noqa: E731
    loads = [load_1m()]
    vllm_status, vllm_arm = _vllm_status(extra["vllm"], device.type), None
    try:
        with tempfile.TemporaryDirectory() as tmp:
            burst = make(float("inf"))
            serve(model, burst[: min(4, len(burst))], engine_config, seed=params.seed, device=device)  # warm-up
            saturation = run_summary(serve(model, burst, engine_config, seed=params.seed, device=device, clock=clock))
            sat_rate = saturation.num_finished / saturation.makespan_s
            rates = extra.get("rates") or tuple(float(f"{sat_rate * m:.3g}") for m in size["multipliers"])
            log(f"  saturation (all {num_requests} requests at once): {saturation.output_tok_s:.1f} out tok/s, "
                f"{sat_rate:.3g} req/s; rates {', '.join(f'{r:g}' for r in rates)}; load {loads[-1]}")
            runs, calibrations = [], []
            runs_to_do = [(repeat, rate) for repeat in range(repeats) for rate in rates]
            for repeat, rate in progress(runs_to_do, desc="measured and simulated runs", unit="run"):
                requests = make(rate)
                path = calibrate(spec, device, dtype, params.seed, burst, max_batch, clock, params.quick,
                                  Path(tmp), len(calibrations))
                calibrations.append({"system": SYSTEM, "repeat": repeat, "rate_per_s": rate,
                                     **calibration_record(path, load_1m())})
                sim_config = SimConfig(model=spec.name, gpu=str(device), link="intra-node", num_blocks=num_blocks,
                                       coefficients_path=str(path),
                                       engine=sim_engine(num_instances=1, block_size=BLOCK_SIZE,
                                                         max_batch_size=max_batch, seed=params.seed))
                load_before = load_1m()
                measured = run_summary(serve(model, requests, engine_config, seed=params.seed, device=device,
                                             clock=clock))
                loads.append(load_1m())
                predicted = run_summary(simulate(sim_config, requests))
                runs.append({"system": SYSTEM, "repeat": repeat, "rate_per_s": rate, "measured": asdict(measured),
                             "predicted": asdict(predicted), "loadavg_1m_before": load_before,
                             "loadavg_1m_after": loads[-1]})
                log(f"  repeat {repeat} rate {rate:g}/s: measured {measured.output_tok_s:.1f} tok/s, predicted "
                    f"{predicted.output_tok_s:.1f}; TTFT {_ms(measured.mean_ttft_s)} vs {_ms(predicted.mean_ttft_s)}"
                    f" ms; TPOT {_ms(measured.mean_tpot_s)} vs {_ms(predicted.mean_tpot_s)} ms; load {loads[-1]}")
            if vllm_status is None:
                arm = run_arm(spec, make, rates, max_batch=max_batch, max_tokens=max_tokens, repeats=repeats,
                              threads=extra["threads"], seed=params.seed, quick=params.quick, folder=Path(tmp),
                              record=calibration_record, log=log)
                runs, calibrations, vllm_arm = runs + arm["runs"], calibrations + arm["calibrations"], arm["info"]
                loads += [j[k] for j in vllm_arm["jobs"] for k in ("loadavg_1m_before", "loadavg_1m_after")]
                vllm_status = f"ran: vLLM {vllm_arm['jobs'][0]['vllm_version']} as vllm-m, on the wall clock"
            pooled_status, pooled_arm = _pooled_status(extra["pooled"], device.type, extra["pooled_instances"]), None
            if pooled_status is None:
                pooled_arm = _run_pooled(spec, extra, size, repeats, params, Path(tmp), log)
                loads += [pooled_arm["loadavg_1m"]["min"], pooled_arm["loadavg_1m"]["max"]]
                pooled_status = f"ran: {extra['pooled_instances']} Ray instances, a core each, on the wall clock"
            lamina_status, lamina_arm = _ray_arm_status(extra["lamina"], device.type, 2, "Lamina"), None
            if lamina_status is None:
                lamina_arm = _run_lamina(spec, make, max_tokens, size, repeats, params, Path(tmp), log)
                loads += [lamina_arm["loadavg_1m"]["min"], lamina_arm["loadavg_1m"]["max"]]
                lamina_status = "ran: 1 compute + 1 memory Ray instance (Lamina), 2 (Infinite-LLM), on the wall clock"
            pd_status, pd_arm = _full_arm_status(extra["pd"], params.quick, device.type, "pd"), None
            if pd_status is None:
                pd_arm = _run_two_designs("pd", spec, make, max_tokens, size, repeats, params, Path(tmp), log)
                loads += [pd_arm["loadavg_1m"]["min"], pd_arm["loadavg_1m"]["max"]]
                pd_status = "ran: 1 prefill + 1 decode Ray instance (pd), 2 (Infinite-LLM), on the wall clock"
            llumnix_status, llumnix_arm = _full_arm_status(extra["llumnix"], params.quick, device.type, "llumnix"), None
            if llumnix_status is None:
                llumnix_arm = _run_two_designs("llumnix", spec, make, max_tokens, size, repeats, params, Path(tmp),
                                               log)
                loads += [llumnix_arm["loadavg_1m"]["min"], llumnix_arm["loadavg_1m"]["max"]]
                llumnix_status = "ran: 2 Ray instances each (Llumnix, Infinite-LLM), on the wall clock"
            loongserve_status = _full_arm_status(extra["loongserve"], params.quick, device.type, "loongserve")
            loongserve_arm = None
            if loongserve_status is None:
                loongserve_arm = _run_two_designs("loongserve", spec, make, max_tokens, size, repeats, params,
                                                  Path(tmp), log)
                loads += [loongserve_arm["loadavg_1m"]["min"], loongserve_arm["loadavg_1m"]["max"]]
                loongserve_status = "ran: 2 Ray instances each (LoongServe, Infinite-LLM), on the wall clock"
    finally:
        torch.set_num_threads(threads_before)
    points = make_points(runs)
    return {"model": spec.name, "trace_id": extra["trace"], "num_requests": num_requests, "max_tokens": max_tokens,
            "max_batch_size": max_batch, "block_size": BLOCK_SIZE, "num_blocks": num_blocks, "repeats": repeats,
            "clock": clock, "machine": {"device": str(device), "threads": extra["threads"], "cpu_count": os.cpu_count(),
                        "torch": torch.__version__, "loadavg_1m_min": min(loads), "loadavg_1m_max": max(loads),
                        "loadavg_1m_median": sorted(loads)[len(loads) // 2]},
            "saturation": {"output_tok_s": saturation.output_tok_s, "rate_per_s": sat_rate},
            "calibrations": calibrations, "runs": runs, "points": points, "errors": error_table(points),
            "vllm": vllm_status, **({"vllm_arm": vllm_arm} if vllm_arm else {}),
            "pooled": pooled_status, **({"pooled_arm": pooled_arm} if pooled_arm else {}),
            "lamina": lamina_status, **({"lamina_arm": lamina_arm} if lamina_arm else {}),
            "pd": pd_status, **({"pd_arm": pd_arm} if pd_arm else {}),
            "llumnix": llumnix_status, **({"llumnix_arm": llumnix_arm} if llumnix_arm else {}),
            "loongserve": loongserve_status, **({"loongserve_arm": loongserve_arm} if loongserve_arm else {})}


def _ms(value) -> str:
    return "-" if value is None else f"{value * 1e3:.0f}"


def _pooled_status(mode: str, device_type: str, num_instances: int) -> str | None:
    """None where the pooled arm runs, else why it is skipped."""
    return _ray_arm_status(mode, device_type, num_instances, "pooled")


def _ray_arm_status(mode: str, device_type: str, num_instances: int, arm: str) -> str | None:
    """None where an arm on Ray instances runs, else why it is skipped."""
    if mode == "off":
        return f"skipped: --param {arm.lower()}=off"
    if device_type != "cpu":
        return f"skipped: the {arm} arm runs the instances on CPU (the engine runs on {device_type})"
    if (os.cpu_count() or 1) < num_instances:
        return f"skipped: {num_instances} instances need as many cores (this machine has {os.cpu_count()})"
    try:
        import ray  # noqa: F401
    except ImportError:
        return "skipped: ray is not installed"
    return None


def _full_arm_status(mode: str, quick: bool, device_type: str, arm: str) -> str | None:
    """None where a two-design Ray arm runs (auto: full runs only, so that --quick stays short), else why not."""
    if mode == "auto" and quick:
        return f"skipped: --quick (--param {arm}=on runs it)"
    return _ray_arm_status(mode, device_type, 2, arm)


def _run_pooled(spec, extra: dict, size: dict, repeats: int, params: RunParams, folder: Path, log) -> dict:
    from repro.experiments.sim_vs_real.pooled import PooledSetup, run_pooled_arm  # needs ray: checked above

    num_requests = extra.get("pooled_requests") or size["pooled_requests"]
    tokens, quantile = extra["instance_tokens"], extra["long_quantile"]
    factor = scale_factor(trace_id=extra["trace"], instance_tokens=tokens, quantile=quantile)
    max_tokens = max_tokens_for(tokens)

    def make(rate: float):
        return scale_requests(workload(trace_id=extra["trace"], num_requests=num_requests, rate_per_s=rate,
                                       seed=params.seed, source="fitted"), factor, max_tokens)

    setup = PooledSetup(num_instances=extra["pooled_instances"], blocks_per_instance=tokens // POOLED_BLOCK_SIZE,
                        block_size=POOLED_BLOCK_SIZE, max_batch_size=extra["max_batch_size"])
    arm = run_pooled_arm(spec, make, setup, multipliers=size["pooled_multipliers"], repeats=repeats,
                         seed=params.seed, quick=params.quick, folder=folder, log=log, rates=extra.get("pooled_rates"))
    return {**arm, "num_requests": num_requests, "scale_factor": factor, "long_quantile": quantile,
            "instance_tokens": tokens, "max_tokens": max_tokens, "errors": error_table(arm["points"])}


def _run_lamina(spec, make, max_tokens: int, size: dict, repeats: int, params: RunParams, folder: Path,
                log) -> dict:
    from repro.experiments.sim_vs_real.lamina_arm import LaminaSetup, run_lamina_arm  # needs ray: checked above

    max_batch = params.extra["max_batch_size"]
    # the memory instance holds every running request whole: no preemption on either side
    setup = LaminaSetup(blocks_per_instance=max_batch * num_blocks_for(max_tokens, POOLED_BLOCK_SIZE) + 1,
                        block_size=POOLED_BLOCK_SIZE, max_batch_size=max_batch)
    arm = run_lamina_arm(spec, make, setup, multipliers=size["lamina_multipliers"], repeats=repeats,
                         seed=params.seed, quick=params.quick, folder=folder, log=log,
                         rates=params.extra.get("lamina_rates"))
    return {**arm, "max_tokens": max_tokens, "errors": error_table(arm["points"])}


def _run_two_designs(arm: str, spec, make, max_tokens: int, size: dict, repeats: int, params: RunParams,
                     folder: Path, log) -> dict:
    """The pd, Llumnix or LoongServe arm: the design and Infinite-LLM on the same 2 Ray instances."""
    from repro.experiments.sim_vs_real.llumnix_arm import run_llumnix_arm  # needs ray: checked above
    from repro.experiments.sim_vs_real.loongserve_arm import run_loongserve_arm
    from repro.experiments.sim_vs_real.pd_arm import run_pd_arm
    from repro.experiments.sim_vs_real.ray_runs import TwoDesignSetup

    max_batch = params.extra["max_batch_size"]
    # an instance holds every running request whole: no preemption on either side
    setup = TwoDesignSetup(blocks_per_instance=max_batch * num_blocks_for(max_tokens, POOLED_BLOCK_SIZE) + 1,
                           block_size=POOLED_BLOCK_SIZE, max_batch_size=max_batch)
    run_arm = {"pd": run_pd_arm, "llumnix": run_llumnix_arm, "loongserve": run_loongserve_arm}[arm]
    result = run_arm(spec, make, setup, multipliers=size[f"{arm}_multipliers"], repeats=repeats, seed=params.seed,
                     quick=params.quick, folder=folder, log=log, rates=params.extra.get(f"{arm}_rates"))
    return {**result, "max_tokens": max_tokens, "errors": error_table(result["points"])}


def _vllm_status(mode: str, device_type: str) -> str | None:
    """None where the vLLM arm runs, else why it is skipped."""
    if mode == "off":
        return "skipped: --param vllm=off"
    if device_type != "cpu":
        return f"skipped: the vLLM arm runs vLLM's CPU build only (the engine runs on {device_type})"
    why = vllm_unavailable()
    return None if why is None else f"skipped: {why}"


def run_id(params: RunParams) -> str:
    """local-[CLOCK-][vllm-]SIZE-seedN: vllm- where the vLLM arm runs."""
    clock = params.extra.get("clock", "cpu")
    device_type = str(params.extra.get("device", "cpu")).partition(":")[0]
    vllm = _vllm_status(params.extra.get("vllm", "auto"), device_type) is None
    prefix = "local-" + ("" if clock == "cpu" else f"{clock}-") + ("vllm-" if vllm else "")
    return default_run_id(params).replace(f"{params.backend}-", prefix, 1)


EXPERIMENT = Experiment("sim-vs-real", ("simulator validation (issue 16)",), "sim_vs_real.schema.json", run, run_id,
                        plot=plot, backends=("sim", "local"), params=PARAMS)
