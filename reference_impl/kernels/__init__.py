"""DistAttention kernels: `micro_attention`, `scale_reduce`, `dist_attention`, and `store_kv` (see api.py for shapes)."""
from reference_impl.kernels.api import dist_attention, micro_attention, scale_reduce, store_kv

__all__ = ["micro_attention", "scale_reduce", "dist_attention", "store_kv"]
