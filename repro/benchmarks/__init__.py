"""Micro-benchmarks that measure this machine, each framed against a limit measured or specified beside it."""
