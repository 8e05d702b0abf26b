"""sim-vs-real's LoongServe arm: LoongServe served for real on Ray (systems/loongserve/on_engine.py: one token pool
over the two instances, each prompt split over the prefill group LoongServe's analytic model chooses on the
server's cost model, and prefilled sequence-parallel, every member computing its own segment with the K/V over the
gloo data plane; decode multi-master) and Infinite-LLM on the same two Ray instances, the same requests; both
simulated with the cost model calibrated on this machine just before each rate. The simulated LoongServe is the
design's own pricing (systems/loongserve/: the ring prefill on the group the same analytic model chooses, the ring's
hops over the calibration's gloo link)."""
from reference_impl.backends.ray.serving import engine_run
from reference_impl.systems.catalog import design
from reference_impl.systems.registry import system_config
from repro.experiments.sim_vs_real.ray_runs import TwoDesignSetup, run_designs

LOONGSERVE, BASELINE = "loongserve", "infinite-llm"
SYSTEMS = (LOONGSERVE, BASELINE)


def run_loongserve_arm(spec, make_requests, setup: TwoDesignSetup, *, multipliers, repeats: int, seed: int,
                       quick: bool, folder, log, rates=None) -> dict:
    """Measured and simulated runs of LoongServe and Infinite-LLM at every rate on `setup`'s instances."""
    runs = {}
    for system in SYSTEMS:
        run = engine_run(design(system), setup.num_instances, setup.blocks_per_instance, setup.block_size,
                         max_batch_size=setup.max_batch_size, seed=seed)
        runs[system] = (run.config, {"placement": run.placement, "homes": run.homes, "moves": run.moves})

    def simulated(base, perf, requests):
        return {LOONGSERVE: system_config(LOONGSERVE, base), BASELINE: system_config(BASELINE, base)}

    return run_designs(spec, make_requests, setup, runs, simulated, label="loongserve arm", multipliers=multipliers,
                       repeats=repeats, seed=seed, quick=quick, folder=folder, log=log, rates=rates)
