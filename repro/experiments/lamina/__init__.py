"""lamina (lamina Fig 13): the arithmetic (arithmetic.py) and the served clusters (serving.py) of experiment.py."""
from repro.experiments.lamina.experiment import EXPERIMENT

__all__ = ["EXPERIMENT"]
