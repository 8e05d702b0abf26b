"""A measured quantity as a piecewise-linear curve through knots picked from the profile rows."""
from bisect import bisect_right
from dataclasses import dataclass

import numpy as np

SIGNIFICANT_DIGITS = 6  # knots are rounded so the committed JSON is the same on every platform


def round_sig(value: float) -> float:
    return float(f"{value:.{SIGNIFICANT_DIGITS}g}")


@dataclass(frozen=True, slots=True)
class Curve:
    """y(x) linear between knots; below the first knot y is the first value (a latency floor); above the
    last knot y grows in proportion to x (bandwidth- or compute-bound: time per unit stays constant)."""

    xs: tuple[float, ...]
    ys: tuple[float, ...]

    def __call__(self, x: float) -> float:
        xs, ys = self.xs, self.ys
        if x <= xs[0]:
            return ys[0]
        if x >= xs[-1]:
            return ys[-1] * x / xs[-1]
        i = bisect_right(xs, x)
        x0, x1 = xs[i - 1], xs[i]
        return ys[i - 1] + (ys[i] - ys[i - 1]) * (x - x0) / (x1 - x0)

    def to_json(self) -> dict:
        return {"x": [int(x) if float(x).is_integer() else x for x in self.xs], "y": list(self.ys)}

    @classmethod
    def from_json(cls, doc: dict) -> "Curve":
        return cls(tuple(float(x) for x in doc["x"]), tuple(float(y) for y in doc["y"]))


def aggregate_median(xs, ys) -> tuple[np.ndarray, np.ndarray]:
    """Unique sorted x with the median y of the rows at each x."""
    xs, ys = np.asarray(xs, dtype=float), np.asarray(ys, dtype=float)
    ux = np.unique(xs)
    return ux, np.array([np.median(ys[xs == x]) for x in ux])


def fit_curve(xs, ys, *, max_rel_err: float) -> Curve:
    """Greedy knot insertion: start from the end points and add the worst-fitted point until every
    aggregated point is within `max_rel_err` (relative) or every point is a knot."""
    ux, uy = aggregate_median(xs, ys)
    if len(ux) == 0 or np.any(uy <= 0):
        raise ValueError("fit_curve needs at least one point and positive y values")
    ry = np.array([round_sig(y) for y in uy])
    chosen = sorted({0, len(ux) - 1})
    while True:
        curve = Curve(tuple(float(ux[i]) for i in chosen), tuple(float(ry[i]) for i in chosen))
        err = np.abs(np.array([curve(x) for x in ux]) - uy) / uy
        worst = int(np.argmax(err))
        if err[worst] <= max_rel_err or len(chosen) == len(ux):
            return curve
        chosen = sorted(set(chosen) | {worst})


def isotonic(ys, weights) -> list[float]:
    """Weighted least-squares non-decreasing fit (pool adjacent violators)."""
    blocks: list[list[float]] = []  # [mean, weight, count]
    for y, w in zip(ys, weights):
        blocks.append([float(y), float(w), 1])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            (m1, w1, n1), (m2, w2, n2) = blocks.pop(-2), blocks.pop()
            blocks.append([(m1 * w1 + m2 * w2) / (w1 + w2), w1 + w2, n1 + n2])
    return [m for m, _, n in blocks for _ in range(n)]


def relative_errors(curve: Curve, xs, ys) -> np.ndarray:
    ys = np.asarray(ys, dtype=float)
    return np.abs(np.array([curve(x) for x in xs]) - ys) / ys
