"""The simulator's cost of an event does not grow with the cluster (issue 42): trace 0 at the same load and the
same requests per GPU on SMALL_GPUS and on BIG_GPUS (scale_growth.py), CPU time of interleaved rounds in this run;
a step of the big cluster's costs at most MAX_GROWTH times one of the small one's. A scan over every instance
per event makes it grow with the cluster (test_speed_scale_guard_fails.py)."""
import pytest
from scale_growth import BIG_GPUS, MAX_GROWTH, SMALL_GPUS, measure_growth

pytestmark = pytest.mark.regression


def test_the_cost_of_a_step_does_not_grow_with_the_cluster(benchmark):
    benchmark.group = f"sim-scale ({SMALL_GPUS} -> {BIG_GPUS} GPUs)"
    ratio = measure_growth(benchmark)
    benchmark.extra_info.update(growth=ratio.growth, small_s=ratio.small_s, big_s=ratio.big_s)
    assert ratio.growth <= MAX_GROWTH, (
        f"a step costs {ratio.growth:.2f}x as much on {BIG_GPUS} GPUs as on {SMALL_GPUS} (at most {MAX_GROWTH}x): "
        "some per-event work scans the whole cluster (profile repro bench scale's largest point)")
