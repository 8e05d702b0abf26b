"""sim-vs-real's Llumnix arm: Llumnix served for real on Ray (systems/llumnix/on_engine.py: vLLM-M's instances, no
KV pooling, running requests live-migrated between them by Llumnix's freeness rule, pre-copy stages then the pause,
KV over the gloo data plane) and Infinite-LLM on the same two Ray instances, the same requests; both simulated with
the cost model calibrated on this machine just before each rate. The simulated Llumnix is the design's own pricing
(systems/llumnix/) with the same knobs as the real rule (LlumnixKnobs' defaults), its migrations' KV priced over the
calibration's gloo link."""
from reference_impl.backends.ray.serving import engine_run
from reference_impl.systems.catalog import design
from reference_impl.systems.llumnix.knobs import LlumnixKnobs
from reference_impl.systems.registry import system_config
from repro.experiments.sim_vs_real.ray_runs import TwoDesignSetup, run_designs

LLUMNIX, BASELINE = "llumnix", "infinite-llm"
SYSTEMS = (LLUMNIX, BASELINE)


def run_llumnix_arm(spec, make_requests, setup: TwoDesignSetup, *, multipliers, repeats: int, seed: int,
                    quick: bool, folder, log, rates=None) -> dict:
    """Measured and simulated runs of Llumnix and Infinite-LLM at every rate on `setup`'s instances."""
    knobs = LlumnixKnobs()
    runs = {}
    for system, system_knobs in ((LLUMNIX, knobs), (BASELINE, None)):
        run = engine_run(design(system), setup.num_instances, setup.blocks_per_instance, setup.block_size,
                         max_batch_size=setup.max_batch_size, seed=seed, knobs=system_knobs)
        runs[system] = (run.config, {"placement": run.placement, "homes": run.homes, "moves": run.moves})

    def simulated(base, perf, requests):
        return {LLUMNIX: system_config(LLUMNIX, base), BASELINE: system_config(BASELINE, base)}

    return run_designs(spec, make_requests, setup, runs, simulated, label="llumnix arm", multipliers=multipliers,
                       repeats=repeats, seed=seed, quick=quick, folder=folder, log=log, rates=rates)
