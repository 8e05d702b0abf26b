"""Workloads: the nine traces of infinite-llm Table 1, the eighteen datasets of distkv-llm Table 2,
arrivals, and the JSONL format the engine and simulator read.

The names below are imported on first use, so `repro workloads --help` does not load numpy.
"""
import importlib
import sys
import types

_EXPORTS = {"Request": "workloads.request", "SourceOptions": "workloads.sources.options",
            "generate": "workloads.generate", "load_jsonl": "workloads.io", "save_jsonl": "workloads.io"}
__all__ = sorted(_EXPORTS)


class _Package(types.ModuleType):
    def __getattr__(self, name):
        if name in _EXPORTS:
            return getattr(importlib.import_module(_EXPORTS[name]), name)
        raise AttributeError(f"module 'workloads' has no attribute {name!r}")

    def __setattr__(self, name, value):
        # Importing the submodule workloads.generate binds it on the package; `workloads.generate` stays the function
        if name in _EXPORTS and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
