"""Experiments of `repro run`: one module per experiment, each exposing EXPERIMENT (an `Experiment`)."""
