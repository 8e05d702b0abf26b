"""Real vLLM as a peer system: the adapter (backend), the runner it starts in vLLM's own environment, and the
comparisons and experiments that use it (docs/real-vllm.md)."""
