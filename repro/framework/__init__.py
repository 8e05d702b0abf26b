"""The experiment framework: an experiment's declaration and run (base.py), its parameters (params.py), the registry of
`repro run --experiment NAME` (registry.py) and the figures' common drawing (figures.py)."""
