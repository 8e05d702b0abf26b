"""Guard 2: measured speed. Each case times the code under test and an independent reference in the same run
(interleaved rounds, CPU time) and asserts their ratio against the committed baseline
(repro/data/speed_baseline.json) within its tolerance; pytest-benchmark records the subject's rounds
(`make test` writes them with --benchmark-json; compare runs with `pytest-benchmark compare`)."""
import dataclasses

import pytest

from repro.regression.speed import RatioMeter, check_ratio, load_baseline
from repro.regression.speed_workloads import CASES

pytestmark = pytest.mark.regression


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_speed_ratio_holds_its_baseline(benchmark, bench_size, case):
    if case.name == "engine-decode":
        pytest.importorskip("transformers")
    meter = RatioMeter.for_case(case, bench_size)
    benchmark.group = f"{case.name} ({bench_size})"
    benchmark.pedantic(meter.target, setup=meter.setup, rounds=meter.num_rounds)
    meter.run_rounds()  # the rounds pytest-benchmark did not run (it runs one when disabled, e.g. under xdist)
    result = meter.result()
    benchmark.extra_info.update(dataclasses.asdict(result))
    failure = check_ratio(result, load_baseline())
    if failure:
        pytest.fail(failure, pytrace=False)
