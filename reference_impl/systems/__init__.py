"""The serving designs compared, used by every backend: each a module with its `DESIGN` (design.py), listed by
name in catalog.py; registry.py sizes Infinite-LLM's cluster, the base every design reshapes."""
