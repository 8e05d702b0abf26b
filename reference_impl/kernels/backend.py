"""Which implementation runs a kernel call: Triton (GPU, or the interpreter on CPU) or plain PyTorch."""
import os

import torch

from reference_impl.errors import InputError

BACKENDS = ("auto", "triton", "torch")


def resolve_backend(backend: str, device: torch.device) -> str:
    if backend not in BACKENDS:
        raise InputError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    if backend == "auto":
        return "triton" if device.type == "cuda" else "torch"
    return backend


def load_triton():
    """Import the Triton kernels; on a machine without CUDA the Triton interpreter runs them on CPU.

    The interpreter flag is read when a kernel is decorated, so it is set before the first import.
    """
    if not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")
    try:
        from reference_impl.kernels import triton_kernels
    except ImportError as exc:  # triton is an optional extra
        raise InputError(f"the Triton backend needs triton ({exc}); install it with `pip install triton`") from exc
    return triton_kernels


def is_interpreted() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
