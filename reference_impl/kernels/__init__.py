"""Kernels: `micro_attention`, `scale_reduce`, `dist_attention`, `store_kv` and `silu_mul` (see api.py for shapes)."""
from reference_impl.kernels.api import dist_attention, micro_attention, scale_reduce, silu_mul, store_kv

__all__ = ["micro_attention", "scale_reduce", "dist_attention", "store_kv", "silu_mul"]
