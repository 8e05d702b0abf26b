"""DistAttention kernels: `micro_attention`, `scale_reduce`, `dist_attention` (see api.py for shapes)."""
from reference_impl.kernels.api import dist_attention, micro_attention, scale_reduce

__all__ = ["micro_attention", "scale_reduce", "dist_attention"]
