"""The arms of `repro run --experiment sim-vs-real` (repro/experiments/sim_vs_real/experiment.py): the cost model calibrated
on the machine at hand, real vLLM as a measured system, the points and their errors."""
