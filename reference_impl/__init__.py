"""Infinite-LLM reference engine: DistAttention kernels, rBlocks, rManager, gManager, instances."""
