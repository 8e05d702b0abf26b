"""Traces 0-8 of infinite-llm Table 1: context lengths matching each row's range, average and SD.

Method (every assumption here is also in the README):
- A request's context length is prompt_len + output_len, the KV cache it holds when it finishes.
- Traces 0-2 (ShareGPT4 and two subsets with smaller SD): Table 1's SDs are 66-92 % of the largest SD
  any distribution on [1, 60000] with that average can have, so each trace is a short "body" plus a few
  requests near the top of the range. The tail is uniform on [0.9 * max, max] (ShareGPT V3, the data we
  can get offline, is split into chunks of about 2k tokens and has no such tail, so the tail is always
  fitted). Its weight w and the body mean are solved so the mixture has Table 1's average and SD exactly;
  the tail count is w * n, rounded at random, at random positions.
  - Real body: ShareGPT requests (first human turn -> prompt, first reply -> output, vLLM's convention)
    no longer than the range, resampled with weights exp(-theta * len), theta solved for the body mean:
    the subset of real requests closest (least KL) to the data that has that mean. Each keeps its real
    prompt/output split.
  - Fitted body: lognormal with ShareGPT V3's log-SD of context length, mean solved as above; output is
    ShareGPT V3's token-weighted output share of the context.
- Trace 3 (L-Eval): real L-Eval requests (local file or hub) resampled uniformly within the range, with
  their real split; otherwise fitted like traces 4-8.
- Traces 4-8 (a private online service; only Table 1's statistics are published): a Beta distribution
  on [1, max] with Table 1's average and SD (method of moments).
- Long requests (the tail, traces 3-8, and distkv-llm datasets) are a long document plus a chat-sized
  answer: output drawn from ShareGPT V3's reply-length lognormal, at most half the context.
- Every context is at least 2 tokens (one prompt and one output token).
"""
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from reference_impl.errors import InputError
from workloads import lengths
from workloads.paper_tables import TRACES, TraceRow
from workloads.sources.real import RealLengths

REAL_KIND = {0: "sharegpt", 1: "sharegpt", 2: "sharegpt", 3: "leval"}


@dataclass(frozen=True, slots=True)
class LengthBatch:
    """prompt_lens [n], output_lens [n], and the source label of each request [n]."""

    prompt_lens: np.ndarray
    output_lens: np.ndarray
    labels: list[str]


def method(trace_id: int, real: RealLengths | None) -> str:
    if trace_id in (0, 1, 2):
        body = real.name if real is not None else "fitted lognormal"
        return f"body: {body}; tail: fitted uniform [0.9 max, max]"
    if trace_id == 3 and real is not None:
        return f"{real.name}, resampled within the range"
    return "fitted Beta on [1, max] (Table 1 average and SD)"


def sample_trace(trace_id: int, n: int, rng: np.random.Generator, real: RealLengths | None = None) -> LengthBatch:
    row = TRACES[trace_id]
    if trace_id in (0, 1, 2):
        return _sample_short(row, n, rng, real)
    if trace_id == 3 and real is not None:
        return _sample_resampled(row, n, rng, real)
    ctx = lengths.sample_beta_lengths(row.min_len, row.max_len, row.avg_len, row.sd_len, n, rng)
    prompt, output = lengths.split_by_reply(ctx, rng)
    return LengthBatch(prompt, output, [f"fitted:trace-{trace_id}"] * n)


def _sample_short(row: TraceRow, n: int, rng: np.random.Generator, real: RealLengths | None) -> LengthBatch:
    body_mean, tail_weight, body_p = _short_fit(row.trace_id, real)
    num_tail = lengths.exact_count(n, tail_weight, rng)
    tail_ctx = lengths.sample_tail(row.max_len, num_tail, rng)
    tail_prompt, tail_output = lengths.split_by_reply(tail_ctx, rng)
    num_body = n - num_tail
    if real is None:
        body_ctx = lengths.sample_lognormal_body(body_mean, row.max_len, num_body, rng)
        body_prompt, body_output = lengths.split_by_share(body_ctx, lengths.SHAREGPT_OUTPUT_SHARE)
        body_labels = [f"fitted:trace-{row.trace_id}"] * num_body
    else:
        keep = _within_range(real, row)
        pick = keep[rng.choice(len(keep), size=num_body, p=body_p)]
        body_prompt, body_output = real.prompt_lens[pick], real.output_lens[pick]
        body_labels = [f"{real.name}:{real.ids[i]}" for i in pick]
    is_tail = np.zeros(n, dtype=bool)
    is_tail[rng.choice(n, size=num_tail, replace=False)] = True
    prompt = np.empty(n, dtype=np.int64)
    output = np.empty(n, dtype=np.int64)
    prompt[is_tail], output[is_tail] = tail_prompt, tail_output
    prompt[~is_tail], output[~is_tail] = body_prompt, body_output
    labels = [None] * n
    tail_label = f"fitted:trace-{row.trace_id}-tail"
    body_iter = iter(body_labels)
    for i, t in enumerate(is_tail.tolist()):
        labels[i] = tail_label if t else next(body_iter)
    return LengthBatch(prompt, output, labels)


@lru_cache(maxsize=32)
def _short_fit(trace_id: int, real: RealLengths | None) -> tuple[float, float, np.ndarray | None]:
    """(body mean, tail weight, body weights over the real requests in range or None)."""
    row = TRACES[trace_id]
    if real is None:
        mu, w = lengths.solve_mixture(row.avg_len, row.sd_len, row.max_len, lengths.lognormal_moments,
                                      param_low=row.avg_len, param_high=lengths.MIN_CONTEXT_LEN)
        return mu, w, None
    keep = _within_range(real, row)
    if len(keep) == 0:
        raise InputError(f"{real.name}: no request with a context length in [1, {row.max_len}]")
    x = real.context_lens[keep].astype(np.float64)
    p, w = lengths.solve_tilted_mixture(x, row.avg_len, row.sd_len, row.max_len)
    return float((p * x).sum()), w, p


def _within_range(real: RealLengths, row: TraceRow) -> np.ndarray:
    ctx = real.context_lens
    return np.flatnonzero((ctx >= max(row.min_len, lengths.MIN_CONTEXT_LEN)) & (ctx <= row.max_len))


def _sample_resampled(row: TraceRow, n: int, rng: np.random.Generator, real: RealLengths) -> LengthBatch:
    keep = _within_range(real, row)
    pick = keep[rng.integers(0, len(keep), size=n)]
    return LengthBatch(real.prompt_lens[pick], real.output_lens[pick], [f"{real.name}:{real.ids[i]}" for i in pick])
