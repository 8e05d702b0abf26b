"""sim-vs-real's prefill/decode disaggregation arm: the split served for real on Ray (systems/pd_disagg/hand_over.py:
instance 0 prefills every request and moves it whole, its KV over the gloo data plane, to instance 1, which decodes)
and Infinite-LLM on the same two Ray instances, the same requests; both simulated with the cost model calibrated on
this machine just before each rate (the pooled arm's calibration and measured gloo link).

The simulated split is the design's own pricing (systems/pd_disagg/) with its split fixed to the real one by its
knobs: one prefill and one decode instance of one device each, a prefill step taking every waiting prompt that fits
up to the batch cap (as the real engine batches), the KV hand-over priced over the calibration's link."""
from dataclasses import replace

from reference_impl.backends.ray.serving import engine_run
from reference_impl.systems.catalog import design
from reference_impl.systems.pd_disagg.knobs import PDKnobs
from reference_impl.systems.registry import system_config
from repro.experiments.sim_vs_real.ray_runs import TwoDesignSetup, run_designs

PD, BASELINE = "pd-disaggregation", "infinite-llm"
SYSTEMS = (PD, BASELINE)
NUM_PREFILL = 1


def real_knobs(num_instances: int) -> PDKnobs:
    """The split that runs for real: NUM_PREFILL prefill instances, the rest decode, one device each, prefill steps
    capped by the batch size alone."""
    return PDKnobs(num_prefill=NUM_PREFILL, prefill_tp=1, prefill_pp=1, decode_tp=1, decode_pp=1,
                   prefill_batch_tokens=None)


def pd_sim_config(base, num_instances: int):
    """The simulated split of the real one on `base`'s calibration."""
    return system_config(PD, replace(base, design_knobs=real_knobs(num_instances)))


def run_pd_arm(spec, make_requests, setup: TwoDesignSetup, *, multipliers, repeats: int, seed: int, quick: bool,
               folder, log, rates=None) -> dict:
    """Measured and simulated runs of the split and Infinite-LLM at every rate on `setup`'s instances."""
    runs = {}
    for system, knobs in ((PD, real_knobs(setup.num_instances)), (BASELINE, None)):
        run = engine_run(design(system), setup.num_instances, setup.blocks_per_instance, setup.block_size,
                         max_batch_size=setup.max_batch_size, seed=seed, knobs=knobs)
        runs[system] = (run.config, {"placement": run.placement, "homes": run.homes, "moves": run.moves})

    def simulated(base, perf, requests):
        return {PD: pd_sim_config(base, setup.num_instances), BASELINE: system_config(BASELINE, base)}

    arm = run_designs(spec, make_requests, setup, runs, simulated, label="pd arm", multipliers=multipliers,
                      repeats=repeats, seed=seed, quick=quick, folder=folder, log=log, rates=rates)
    return {**arm, "num_prefill": NUM_PREFILL}
