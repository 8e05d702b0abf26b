"""The systems compared, as policies over one cluster config, used by every backend: Infinite-LLM, vLLM-M, vLLM-S (registry.py)."""
