"""Guard 1: the reproduced numbers of a fixed set of quick simulated configurations equal the committed
reference (repro/data/regression_reference.json) up to float noise. After an intended change: `make bless`."""
import pytest

from repro.regression.cases import CASES
from repro.regression.reference import check_case, load_reference, moved_message

pytestmark = pytest.mark.regression


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_reproduced_numbers_equal_the_reference(case):
    moved, num_compared = check_case(case, load_reference())
    if moved:
        pytest.fail(moved_message(moved, num_compared), pytrace=False)


def test_the_reference_holds_every_case_and_nothing_else():
    assert list(load_reference()["cases"]) == [c.name for c in CASES]
