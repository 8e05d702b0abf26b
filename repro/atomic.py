"""Atomic file writes for the harness (the implementation lives in reference_impl.atomic)."""
from reference_impl.atomic import check_writable_dir, check_writable_file, write_json_atomic, write_text_atomic

__all__ = ["check_writable_dir", "check_writable_file", "write_json_atomic", "write_text_atomic"]
