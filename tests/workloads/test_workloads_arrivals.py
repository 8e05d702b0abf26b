import math

import numpy as np
import pytest

from reference_impl.errors import InputError
from workloads.arrivals import arrival_times_s

NUM = 20000
Z_LIMIT = 4.5  # two-sided; a correct generator fails about once in 150,000 runs


def z_score_of_rate(times_s, rate_per_s, burstiness):
    """z of the mean gap against 1/rate, with the gamma gaps' SD (mean / sqrt(burstiness))."""
    gaps = np.diff(times_s, prepend=0.0)
    sd_of_mean = (1 / rate_per_s) / math.sqrt(burstiness) / math.sqrt(len(gaps))
    return (gaps.mean() - 1 / rate_per_s) / sd_of_mean


@pytest.mark.parametrize("rate_per_s, burstiness", [(0.5, 1.0), (20.0, 1.0), (5.0, 0.25), (5.0, 4.0)])
def test_mean_rate(rate_per_s, burstiness):
    times = arrival_times_s(NUM, rate_per_s, np.random.default_rng(123), burstiness=burstiness)
    assert np.all(np.diff(times) >= 0) and times[0] > 0
    assert abs(z_score_of_rate(times, rate_per_s, burstiness)) < Z_LIMIT
    # The same test rejects a rate 10 % off: it can fail.
    assert abs(z_score_of_rate(times, rate_per_s * 1.10, burstiness)) > Z_LIMIT


@pytest.mark.parametrize("burstiness", [0.25, 1.0, 4.0])
def test_burstiness_sets_the_gap_cv(burstiness):
    gaps = np.diff(arrival_times_s(NUM, 2.0, np.random.default_rng(5), burstiness=burstiness), prepend=0.0)
    cv = gaps.std() / gaps.mean()
    assert cv == pytest.approx(1 / math.sqrt(burstiness), rel=0.05)


def test_poisson_counts_per_window_have_poisson_dispersion():
    rate_per_s = 10.0
    times = arrival_times_s(NUM, rate_per_s, np.random.default_rng(9))
    counts = np.bincount(times.astype(int))[:-1]  # arrivals per 1 s window, last window partial
    assert counts.var() / counts.mean() == pytest.approx(1.0, abs=0.15)


def test_seeded_and_infinite_rate():
    a = arrival_times_s(10, 1.0, np.random.default_rng(1))
    assert np.array_equal(a, arrival_times_s(10, 1.0, np.random.default_rng(1)))
    assert not np.array_equal(a, arrival_times_s(10, 1.0, np.random.default_rng(2)))
    assert np.array_equal(arrival_times_s(4, math.inf, np.random.default_rng(0)), np.zeros(4))


@pytest.mark.parametrize("num, rate, burstiness", [(0, 1.0, 1.0), (5, 0.0, 1.0), (5, -2.0, 1.0),
                                                    (5, math.nan, 1.0), (5, 1.0, 0.0)])
def test_bad_arguments(num, rate, burstiness):
    with pytest.raises(InputError):
        arrival_times_s(num, rate, np.random.default_rng(0), burstiness=burstiness)
