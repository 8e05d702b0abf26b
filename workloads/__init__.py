"""Workloads: the nine traces of infinite-llm Table 1, the eighteen datasets of distkv-llm Table 2,
arrivals, and the JSONL format the engine and simulator read."""
from workloads.generate import SourceOptions, generate
from workloads.io import load_jsonl, save_jsonl
from workloads.request import Request

__all__ = ["Request", "SourceOptions", "generate", "load_jsonl", "save_jsonl"]
