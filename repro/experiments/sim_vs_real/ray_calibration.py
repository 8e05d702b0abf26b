"""The calibration every Ray arm of sim-vs-real takes (pooled.py, and ray_runs.run_designs for the two-design arms):
one method, so that every design is simulated on the same terms.

Before each rate: `repro profile` of one core in CPU time (the layers, the attention kernel), the step overhead of
the Ray engine's own steps on one instance alone (ray_steps.py; the in-process engine's is lower) and the gloo link
between two processes (profiling/link.py). Once, before the saturation runs: how much more CPU a step takes while
every instance computes (co_run.py). From the saturation runs of the arm's designs: what the Ray engine costs beyond
the cost model (EngineCosts), written into every later rate's calibration, which the simulator reads."""
from dataclasses import asdict, replace
from pathlib import Path

import torch

from repro.experiments.sim_vs_real.calibration import (add_engine_costs, add_measured_link, add_ray_steps, calibrate,
                                                       calibration_record, context_tokens, overhead_batches)
from repro.experiments.sim_vs_real.co_run import CoRun, measure_co_run
from repro.experiments.sim_vs_real.ray_steps import RaySteps
from repro.load import load_1m

# The profile's ops are timed in process CPU time: on a shared machine wall-clock medians of the same op moved 40x
# between two calibrations a minute apart (load 4-7); the link is a latency, timed on the wall clock
CALIBRATION_CLOCK = "cpu"
RAY_STEP_DECODE = 8  # decode steps per measured batch of the Ray engine's step grid
RAY_STEP_REPEATS = 2
RAY_GMANAGER_INTERVAL_S = 0.05  # runs of seconds on a small machine: a round every few steps; real and simulated


def sim_config(engine, gm_config, model: str, coefficients_path: Path):
    """The simulated cluster of the real one: the engine's config with the gManager's knobs (its round interval
    among them), its rBlocks per instance, this machine's calibration (`gpu` = CPU_HARDWARE, the name `repro
    profile` gives it) and its gloo link."""
    from reference_impl.calibration.links import GLOO
    from reference_impl.sim.config import SimConfig
    from repro.experiments.sim_vs_real.calibration import CPU_HARDWARE

    return SimConfig(model=model, gpu=CPU_HARDWARE, link=GLOO, num_blocks=engine.blocks_per_instance,
                     coefficients_path=str(coefficients_path), engine=replace(engine, gmanager=gm_config))


def ray_config_for(num_instances: int, num_designs: int):
    """A core per instance, and every design's engines kept warm (one serves at a time, the others held) beside the
    one-instance engine whose steps calibrate the step overhead: 1 / (designs + 1) of a logical CPU per instance
    places them all on `num_instances` CPUs."""
    from reference_impl.backends.ray import RayConfig

    return RayConfig(num_cpus=num_instances, cpus_per_instance=1.0 / (num_designs + 1))


def core_share_stretch(saturation: dict) -> float:
    """How much longer a loop's compute phase takes on the wall clock than in its CPU time while every instance
    serves past saturation (every design's saturation run together): the share of a core a loop gets beside the
    other loops, the driver, the gManager and Ray's threads."""
    wall = sum(s["engine"]["compute_ms"] for s in saturation.values())
    cpu = sum(s["engine"]["compute_cpu_ms"] for s in saturation.values())
    return wall / cpu if cpu > 0 else 1.0


def _per(engines: list[dict], key: str, count: str) -> float:
    """`key` (ms per `count`) over every engine, weighted by its `count`, in seconds (0 without any)."""
    total = sum(e[count] for e in engines)
    return sum(e[key] * e[count] for e in engines) / total / 1e3 if total else 0.0


def engine_costs(saturation: dict, co_run: CoRun) -> dict:
    """EngineCosts' fields measured in the saturation runs (`ray_runs.measure_saturation`'s, every design's):
    how long a debtor step waits for a creditor serving it (the serving thread's wall time, its core shared with
    the creditor's own step) and what that costs the creditor's core (its CPU time), per served step; one
    control-plane call on a peer that waits for its reply, per call (none served, no call: 0); and the co-run
    slowdown, a step's CPU time beside the others over alone times the core share past saturation."""
    engines = [s["engine"] for s in saturation.values()]
    return {"served_step_s": _per(engines, "serve_ms", "num_served"),
            "served_cpu_s": _per(engines, "serve_cpu_ms", "num_served"),
            "peer_call_s": _per(engines, "peer_call_each_ms", "num_peer_calls"),
            "co_run_slowdown": co_run.cpu_ratio * core_share_stretch(saturation)}


def co_run_record(co_run: CoRun, saturation: dict, costs: dict) -> dict:
    return {**asdict(co_run), "core_share_stretch": core_share_stretch(saturation),
            "co_run_slowdown_simulated": costs["co_run_slowdown"]}


class RayCalibration:
    """This machine's calibration for a Ray arm: `calibrated(...)` before each rate, `co_run(...)` once before the
    saturation runs. Holds a one-instance Ray engine (the step overhead's) until `close()`."""

    def __init__(self, spec, model, ray_config, *, label: str, num_instances: int, max_batch: int, block_size: int,
                 burst, seed: int, quick: bool, folder: Path, first: int = 0):
        """burst: the arm's requests (the profile's plan covers them); first: the first calibration file's
        number (arms sharing a folder number theirs apart)."""
        self.spec, self.model, self.ray_config, self.label = spec, model, ray_config, label
        self.num_instances, self.max_batch, self.burst = num_instances, max_batch, burst
        self.seed, self.quick, self.folder, self.first = seed, quick, folder, first
        self.records: list[dict] = []  # what each calibration measured, in order
        self.steps = RaySteps(model, ray_config, max_batch=max_batch, prompt_len=context_tokens(burst),
                              decode=RAY_STEP_DECODE, block_size=block_size, seed=seed)

    def calibrated(self, repeat: int, rate: float, costs: dict | None = None) -> Path:
        """A calibration file of this machine now, with the engine costs `costs` (engine_costs'; none before the
        saturation runs: the simulator's defaults)."""
        torch.set_num_threads(1)  # as each instance's actor runs (REPRO_RAY_TORCH_THREADS)
        path = calibrate(self.spec, torch.device("cpu"), torch.float32, self.seed, self.burst, self.max_batch,
                         CALIBRATION_CLOCK, self.quick, self.folder, self.first + len(self.records))
        add_ray_steps(path, self.spec.name, self.steps.measure(overhead_batches(self.max_batch), RAY_STEP_REPEATS))
        link_s = add_measured_link(path)
        add_engine_costs(path, self.spec.name, costs or {}, f"the saturation runs of the {self.label} (Ray engine)")
        self.records.append({"system": self.label, "repeat": repeat, "rate_per_s": rate,
                             **calibration_record(path, load_1m()), "link_one_way_s": link_s, **(costs or {})})
        return path

    def co_run(self, log) -> CoRun:
        """The co-run measurement on the arm's instances (co_run.py), logged."""
        co_run = measure_co_run(self.model, self.ray_config, self.num_instances, seed=self.seed,
                                rounds=2 if self.quick else 3)
        log(f"  {self.label}: an instance's step computes {co_run.co_run_slowdown:.2f}x as long beside the others "
            f"(alone {', '.join(f'{x:.1f}' for x in co_run.alone_ms)} ms, together "
            f"{', '.join(f'{x:.1f}' for x in co_run.together_ms)} ms)")
        return co_run

    def close(self) -> None:
        self.steps.close()


def costs_text(costs: dict, co_run: CoRun, saturation: dict) -> str:
    return (f"a step's CPU time beside the others {co_run.cpu_ratio:.2f}x alone, its wall time "
            f"{core_share_stretch(saturation):.2f}x its CPU time past saturation: co-run "
            f"{costs['co_run_slowdown']:.2f}; a served step {1e3 * costs['served_step_s']:.1f} ms "
            f"({1e3 * costs['served_cpu_s']:.1f} ms CPU), a peer call {1e3 * costs['peer_call_s']:.1f} ms")
