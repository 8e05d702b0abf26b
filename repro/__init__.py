"""Reproduction harness for Infinite-LLM: the `repro` command line, experiments, results and plots."""
