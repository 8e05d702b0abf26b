"""LoongServe's analytic prefill model and the group choice it drives (arXiv 2404.09526 section 5; the repository's
loongserve/longserve_server/router/profiler.py and test/longserve/2-find-time-function-prefill.py).

time(k, batch) = A_k + B_k * sum l + C_k * sum l^2 for a batch prefilled on k instances. LoongServe fits A, B, C per
k to profiled prefills by least squares on relative error; here they are fitted the same way to this project's
cost of a ring prefill (sp_cost.py, the calibrated model) at a grid of batches, never to the paper's numbers.

The group of a prefill is chosen by the objective of the repository's scheduler (router/manager.py,
`_schedule_new_req_list` and its C++ dynamic program longserve_c_scheduler/src/main.cpp): a batch's time weighted
by the sum of its requests' 1 / input length, plus, for every instance drawn from its decode batch, that batch's
slow-down (`_schedule_new_req_list_with_decoding`: time * batch size * batch size / its output tokens so far).

One copy for every backend: the simulator's backend (backend.py) and the real backends' segment rule
(placement.py `SequenceParallel`) both fit with `prefill_model_for` and choose with `choose_group`.
"""
from dataclasses import dataclass

import numpy as np

from reference_impl.calibration.model import CalibratedPerfModel
from reference_impl.systems.loongserve.sp_cost import ring_prefill

GRID_MIN_TOKENS = 128
GRID_STEP = 2 ** 0.5  # lengths of the fitting grid: a geometric series from GRID_MIN_TOKENS
GRID_BATCH_SIZES = (1, 2, 4, 8)  # batches of equal prompts at each grid length


@dataclass(frozen=True, slots=True)
class PrefillModel:
    """(A_k, B_k, C_k) for k = 1 .. max degree, and the fit's relative error over its grid (mean, max)."""
    coefs: tuple[tuple[float, float, float], ...]
    fit_err_mean: float
    fit_err_max: float

    @property
    def max_degree(self) -> int:
        return len(self.coefs)

    def predict_s(self, degree: int, sum_l: float, sum_l2: float) -> float:
        a, b, c = self.coefs[degree - 1]
        return a + b * sum_l + c * sum_l2


def fitting_grid(max_tokens: int) -> list[list[int]]:
    """Batches of equal prompts, lengths from GRID_MIN_TOKENS up to `max_tokens` tokens in a batch."""
    lengths, n = [], float(GRID_MIN_TOKENS)
    while n <= max_tokens:
        lengths.append(int(n))
        n *= GRID_STEP
    return [[n] * b for n in lengths for b in GRID_BATCH_SIZES if n * b <= max_tokens]


def fit_prefill_model(model: CalibratedPerfModel, max_degree: int, max_tokens: int) -> PrefillModel:
    """A_k, B_k, C_k for k = 1 .. `max_degree`, fitted to the ring prefill's cost on `model` at batches of up to
    `max_tokens` tokens (least squares on relative error, as LoongServe's own fit)."""
    grid = fitting_grid(max(max_tokens, GRID_MIN_TOKENS))
    features = np.array([[1.0, sum(b), sum(n * n for n in b)] for b in grid])
    pairs = [sum(n * (n + 1) // 2 for n in b) for b in grid]
    coefs, errors = [], []
    for k in range(1, max_degree + 1):
        t = np.array([ring_prefill(model, k, sum(b), p).duration_s for b, p in zip(grid, pairs)])
        coef, *_ = np.linalg.lstsq(features / t[:, None], np.ones(len(t)), rcond=None)
        coefs.append(tuple(float(c) for c in coef))
        errors.append(np.abs(features @ coef - t) / t)
    errors = np.concatenate(errors)
    return PrefillModel(tuple(coefs), float(errors.mean()), float(errors.max()))


_FITS: dict = {}  # (cost model, max degree, max tokens) -> PrefillModel: one fit per cluster, shared by its runs


def prefill_model_for(model: CalibratedPerfModel, max_degree: int, max_tokens: int) -> PrefillModel:
    """`fit_prefill_model`, fitted once per (cost model, max degree, max tokens) in this process."""
    key = (model, max_degree, max_tokens)
    if key not in _FITS:
        _FITS[key] = fit_prefill_model(*key)
    return _FITS[key]


@dataclass(frozen=True, slots=True)
class Candidate:
    """An instance that may join a prefill's group: how long until it is free (s) and the slow-down weight of the
    decode batch it would leave (batch size^2 / its output tokens so far; 0 when it decodes nothing)."""
    inst_id: int
    wait_s: float
    decode_weight: float


def choose_group(model: PrefillModel, lengths: list[int], members: list[Candidate],
                 others: list[Candidate]) -> list[int]:
    """The prefill group of a batch of prompts `lengths`: the instances that must take part (`members`: the master
    and the instances holding the batch's KV) and the prefix of `others`, cheapest first, that minimises
    (wait + predicted time) * (sum 1/l + the drawn instances' decode weights). Ties: the smaller group."""
    sum_l, sum_l2 = sum(lengths), sum(n * n for n in lengths)
    weight = sum(1.0 / n for n in lengths)
    others = sorted(others, key=lambda c: (c.wait_s, c.decode_weight, c.inst_id))
    group = list(members)
    wait_s = max(c.wait_s for c in group)
    weight += sum(c.decode_weight for c in group)
    best, best_k = float("inf"), len(group)
    for k in range(len(group), model.max_degree + 1):
        if k > len(group):
            if not others:
                break
            extra = others.pop(0)
            group.append(extra)
            wait_s, weight = max(wait_s, extra.wait_s), weight + extra.decode_weight
        cost = (wait_s + model.predict_s(k, sum_l, sum_l2)) * weight
        if cost < best:
            best, best_k = cost, k
    return [c.inst_id for c in group[:best_k]]
