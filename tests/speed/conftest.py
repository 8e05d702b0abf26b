import pytest

from repro.regression.speed import one_thread


@pytest.fixture
def bench_size(request) -> str:
    return request.config.getoption("--bench-size")


@pytest.fixture(autouse=True)
def torch_on_one_thread():
    with one_thread():
        yield
