"""Atomic file writes for the harness (the implementation lives in reference_impl.atomic)."""
from reference_impl.atomic import write_json_atomic, write_text_atomic

__all__ = ["write_json_atomic", "write_text_atomic"]
