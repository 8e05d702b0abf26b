import os

import pytest
import torch

# The Triton interpreter flag is read when kernels are decorated, so it must be set before any import.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

# Every case simulates its points afresh; the store of finished points (repro/serving/store.py) is tested where a
# case names one (--param store=...)
os.environ["REPRO_POINT_STORE"] = "off"


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)


def pytest_addoption(parser):
    parser.addoption("--bench-size", choices=("ci", "large"), default="ci",
                     help="sizes of the speed guard (tests/speed): ci for `make test`, large for `make bench`")


@pytest.fixture
def repro_cli(capsys):
    """`repro ARGV` through its console entry point: (exit status, stdout, stderr)."""
    from repro.cli import main

    def run(argv) -> tuple[int, str, str]:
        try:
            main(argv)
            code = 0
        except SystemExit as exc:
            code = exc.code
        out, err = capsys.readouterr()
        return code, out, err
    return run
