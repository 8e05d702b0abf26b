"""The attention micro-benchmark (infinite-llm Fig 11, distkv-llm Fig 11-12): one decode query's attention on
real processes (ranks.py) as DistAttention (dist.py), RingAttention (ring.py) and TP attention (tp.py), timed by
measure.py, and the calibrated A100 times of the same (cost_model.py)."""
