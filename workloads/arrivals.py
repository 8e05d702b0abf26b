"""Arrival times: Poisson, or gamma with a burstiness knob (vLLM benchmarks' convention)."""
import math

import numpy as np

from reference_impl.errors import InputError


def arrival_times_s(num_requests: int, rate_per_s: float, rng: np.random.Generator, *,
                    burstiness: float = 1.0) -> np.ndarray:
    """Arrival times [num_requests] in seconds, ascending, the first one after one gap.

    Gaps are gamma(shape=burstiness, mean=1/rate): burstiness 1.0 is a Poisson process, below 1 is
    burstier (CV = 1/sqrt(burstiness)), above 1 is smoother. rate inf puts every arrival at 0.
    """
    if num_requests < 1:
        raise InputError(f"number of requests must be >= 1, got {num_requests}")
    if not rate_per_s > 0:
        raise InputError(f"request rate must be > 0 requests/s, got {rate_per_s}")
    if not (burstiness > 0 and math.isfinite(burstiness)):
        raise InputError(f"burstiness must be a finite number > 0, got {burstiness}")
    if math.isinf(rate_per_s):
        return np.zeros(num_requests)
    gaps_s = rng.gamma(shape=burstiness, scale=1.0 / (rate_per_s * burstiness), size=num_requests)
    return np.cumsum(gaps_s)
