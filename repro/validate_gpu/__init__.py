"""`repro validate-gpu`: the engine and the cost model checked on one GPU in one prepared command (issue 43).

Five parts, each in its own process with its own time budget (runner.py): DistAttention's exactness and
bandwidth (attention.py), the engine against transformers (engine_check.py), real step times against the
simulator's cost model (steps.py), pooling on one GPU (pooling.py) and sim-vs-real serving (serving.py).
`--dry-run` runs the same code on the CPU at toy sizes (sizes.py), so the command cannot rot between GPU runs.
"""
