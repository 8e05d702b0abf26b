"""Is a Hugging Face hub reachable? Answered fast (offline flags, then a 1 s TCP connect), never hanging."""
import os
import socket
from functools import lru_cache
from urllib.parse import urlparse

_CONNECT_TIMEOUT_S = 1.0
_TRUTHY = {"1", "true", "yes", "on"}


@lru_cache(maxsize=1)
def hub_reachable() -> bool:
    if any(os.environ.get(flag, "").lower() in _TRUTHY for flag in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")):
        return False
    try:
        import datasets  # noqa: F401
        from huggingface_hub import constants
    except ImportError:
        return False
    url = urlparse(os.environ.get("HF_ENDPOINT") or constants.ENDPOINT)
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        with socket.create_connection((url.hostname, port), timeout=_CONNECT_TIMEOUT_S):
            return True
    except OSError:
        return False
