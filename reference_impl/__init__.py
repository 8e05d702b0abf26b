"""Infinite-LLM reference engine: DistAttention kernels, rBlocks, rManager, gManager, instances, and the simulated
cluster that serves the same engine at datacenter scale.

The names a notebook needs are here (docs/api.md); each is imported on first use, so `import reference_impl` loads
neither torch nor Ray:

    from reference_impl import cluster, simulate, system_config, workload
    run = simulate(system_config("infinite-llm", cluster("llama2-7b", "A100-80GB-SXM", 4)),
                   workload(trace_id=0, num_requests=50, rate_per_s=2.0, seed=0))
    print(run.summary().steady_output_tok_s)
"""
import importlib

# public name -> (module, attribute): the one list of the public API (tests/docs/test_api.py keeps it whole)
_EXPORTS = {
    # the simulated cluster and the designs it runs
    "SimConfig": ("reference_impl.sim.config", "SimConfig"),
    "cluster": ("reference_impl.systems.registry", "cluster"),
    "system_config": ("reference_impl.systems.registry", "system_config"),
    "DESIGN_NAMES": ("reference_impl.systems.catalog", "DESIGN_NAMES"),
    "design": ("reference_impl.systems.catalog", "design"),
    "simulate": ("reference_impl.systems.run", "simulate"),
    "ServingRun": ("reference_impl.serving.records", "ServingRun"),
    "Summary": ("reference_impl.serving.records", "Summary"),
    # the engine: its config, generation on each backend, sampling
    "EngineConfig": ("reference_impl.control.engine_config", "EngineConfig"),
    "generate": ("reference_impl.backends.local", "generate"),
    "GenerationResult": ("reference_impl.backends.local", "GenerationResult"),
    "generate_ray": ("reference_impl.backends.ray", "generate"),
    "RayConfig": ("reference_impl.backends.ray.cluster", "RayConfig"),
    "SamplingParams": ("reference_impl.control.sampling", "SamplingParams"),
    "GREEDY": ("reference_impl.control.sampling", "GREEDY"),
    # models and their tokenizers
    "resolve_model": ("reference_impl.model.resolve", "resolve_model"),
    "model_folder": ("reference_impl.model.resolve", "model_folder"),
    "load_model": ("reference_impl.model.llama", "load_model"),
    "random_model": ("reference_impl.model.llama", "random_model"),
    "TINY": ("reference_impl.model.llama", "TINY"),
    "load_tokenizer": ("reference_impl.model.tokenizer", "load_tokenizer"),
    # workloads: the papers' traces and datasets, and the JSONL the CLI reads
    "workload": ("workloads.generate", "generate"),
    "Request": ("workloads.request", "Request"),
    "load_jsonl": ("workloads.io", "load_jsonl"),
    "save_jsonl": ("workloads.io", "save_jsonl"),
    "InputError": ("reference_impl.errors", "InputError"),
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'reference_impl' has no attribute {name!r}")
    module, attr = _EXPORTS[name]
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value  # the next lookup finds it without this function
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
