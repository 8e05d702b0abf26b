"""CI's regression guards: reproduced numbers against a committed reference (cases.py, reference.py) and
measured speed against a committed baseline of ratios to independent references (speed.py, speed_workloads.py).
docs/regression.md says what they guard and how to re-bless."""
