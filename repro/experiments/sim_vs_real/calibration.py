"""The cost model of the machine at hand for sim-vs-real: `repro profile` with a plan covering the workload (the
engine's per-step overhead included), and the record of what each calibration measured."""
import json
from pathlib import Path

from reference_impl.calibration.coefficients import dumps
from reference_impl.calibration.engine_costs import engine_cost_field
from reference_impl.calibration.engine_steps import fit_engine_steps
from reference_impl.profiling.link import add_link, measure_link
from reference_impl.profiling.local import ProfilePlan, profile

# The step overhead is measured at every batch to 6 and more sparsely above: on a CPU the LM head's matrix product
# takes twice as long from 4 rows as at 3 (the BLAS changes kernel), which a line through 1, 4 and 32 misses
OVERHEAD_BATCHES = (1, 2, 3, 4, 5, 6, 8, 12, 16, 24)
CPU_HARDWARE = "cpu"  # the hardware name `repro profile` gives this machine's calibration


def overhead_batches(largest: int) -> tuple[int, ...]:
    return tuple(b for b in OVERHEAD_BATCHES if b < largest) + (largest,)


def context_tokens(requests) -> int:
    """A decode step's typical context in the workload: prompt plus half the output, averaged."""
    return max(1, int(sum(r.prompt_len + r.output_len / 2 for r in requests) / len(requests)))


def calibrate(spec, device, dtype, seed: int, requests, max_batch: int, clock: str, quick: bool, folder: Path,
              repeat: int) -> Path:
    """`repro profile` of this machine with a plan covering the workload; the file the simulator reads."""
    prompts = sorted(r.prompt_len for r in requests)
    total = sum(prompts)
    more = () if quick else (2, 8, 32, 64, 128, 256, 512)
    plan = ProfilePlan(tokens=tuple(sorted({1, 4, 16, max_batch, total, *more})),
                       kv_lens=(256, 1024) if quick else (256, 1024, 2048), copy_bytes=(1 << 12, 1 << 20),
                       prefill_tokens=prompts[len(prompts) // 2], repeats=5 if quick else 7, clock=clock,
                       overhead_batches=overhead_batches(max_batch),
                       overhead_prefill_seqs=overhead_batches(min(16, len(prompts))),
                       overhead_prompt_len=prompts[len(prompts) // 2],
                       overhead_context_tokens=context_tokens(requests))
    doc = profile(spec, name=str(device), device=device, dtype=dtype, quick=False, seed=seed + repeat, plan=plan)
    path = folder / f"calibration-{repeat}.json"
    path.write_text(dumps(doc))
    return path


def calibration_record(path: Path, load: float) -> dict:
    doc = json.loads(path.read_text())
    (hw,) = doc["hardware"].values()
    (overhead,) = hw["step_overhead_s"].values()
    (layer,) = (c["1"] for c in hw["non_attention_s"].values())
    return {"loadavg_1m": load, "kv_read_bytes_per_s": hw["attention"]["kv_read_bytes_per_s"],
            "attention_call_s": hw["attention"]["call_s"],
            "prefill_attn_flops_per_s": hw["attention"]["prefill_attn_flops_per_s"],
            "non_attention_s": {"x": layer["x"], "y": layer["y"]},
            "step_overhead_decode_s": {"x": overhead["decode"]["x"], "y": overhead["decode"]["y"]},
            "step_overhead_prefill_s": {"x": overhead["prefill"]["x"], "y": overhead["prefill"]["y"]},
            "step_overhead_source": overhead["decode"]["source"]}


def add_measured_link(path: Path) -> dict:
    """Measure the gloo link between two processes here and add it to the calibration at `path` (the simulator
    reads it as link `links.GLOO`); returns one-way seconds by message bytes."""
    sizes, times_s = measure_link()
    path.write_text(dumps(add_link(json.loads(path.read_text()), sizes, times_s, "gloo ping-pong on this machine")))
    return dict(zip(map(str, sizes), times_s))


def add_engine_costs(path: Path, model: str, costs: dict[str, float], source: str) -> None:
    """Add what the Ray engine of this machine measured (EngineCosts' fields: served_step_s, served_cpu_s,
    peer_call_s, co_run_slowdown) to the calibration at `path`."""
    doc = json.loads(path.read_text())
    (hardware,) = doc["hardware"].values()
    for key, value in costs.items():
        hardware[key] = {model: {engine_cost_field(key): value, "source": source}}
    path.write_text(dumps(doc))


def add_ray_steps(path: Path, model: str, steps) -> None:
    """Replace the step overhead in the calibration at `path` by the one the Ray engine's own steps show
    (`steps`: decode and prefill steps from ray_steps.RaySteps.measure); the op-level KV read rate is kept (each
    batch's decode steps are taken at one context)."""
    decode, prefill = steps
    doc = fit_engine_steps(json.loads(path.read_text()), CPU_HARDWARE, model, decode, prefill,
                           kv_batch=None, engine="the Ray engine (one instance, alone)",
                           source="Ray engine steps on this machine, loop CPU time (repro/experiments/sim_vs_real/ray_steps.py)")
    path.write_text(dumps(doc))
