"""Is a Hugging Face hub reachable? Answered fast (offline flags, then a 1 s TCP connect), never hanging."""
import os
import socket
import threading
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
    return endpoint_reachable(os.environ.get("HF_ENDPOINT") or constants.ENDPOINT)


def endpoint_reachable(endpoint: str) -> bool:
    """A TCP connect to the endpoint's host; name lookup is not bound by the socket timeout, so the
    whole attempt runs in a daemon thread that is abandoned after twice the timeout."""
    url = urlparse(endpoint)
    port = url.port or (443 if url.scheme == "https" else 80)
    answer = []

    def attempt():
        try:
            with socket.create_connection((url.hostname, port), timeout=_CONNECT_TIMEOUT_S):
                answer.append(True)
        except OSError:
            answer.append(False)

    thread = threading.Thread(target=attempt, daemon=True)
    thread.start()
    thread.join(2 * _CONNECT_TIMEOUT_S)
    return bool(answer and answer[0])
