"""serve.InTurn: a partner serves one home's works in the home's order, whatever order Ray's threads bring them in,
and never two of one home's at once; different homes do not wait for each other."""
import threading
import time

import pytest

pytest.importorskip("ray")

from reference_impl.backends.ray.serve import InTurn, PartnerWork  # noqa: E402


def run_all(turns, works, hold_s=0.01):
    ran, running, overlap = [], set(), []
    lock = threading.Lock()

    def serve(work):
        with turns.turn(work, timeout_s=10):
            with lock:
                overlap.extend(k for k in running if k[0] == work.home)
                running.add((work.home, work.number))
            time.sleep(hold_s)
            with lock:
                running.discard((work.home, work.number))
                ran.append((work.home, work.number))

    threads = [threading.Thread(target=serve, args=(w,)) for w in works]
    for t in threads:  # started in the order given (latest numbers first below)
        t.start()
        time.sleep(0.002)
    for t in threads:
        t.join()
    return ran, overlap


def test_one_homes_works_run_in_number_order_one_at_a_time():
    works = [PartnerWork(home=1, group="g", ask=None, number=n) for n in (3, 1, 2, 0)]
    ran, overlap = run_all(InTurn(), works)
    assert ran == [(1, 0), (1, 1), (1, 2), (1, 3)] and not overlap


def test_homes_do_not_wait_for_each_other():
    # home 2's work 0 arrives behind home 1's blocked work 1 (whose work 0 never comes within the test) and runs
    turns = InTurn()
    late = PartnerWork(home=1, group="g", ask=None, number=1)
    blocked = threading.Thread(target=lambda: pytest.raises(TimeoutError, _serve_with_timeout, turns, late, 0.5))
    blocked.start()
    ran, _ = run_all(turns, [PartnerWork(home=2, group="g", ask=None, number=0)])
    assert ran == [(2, 0)] and blocked.is_alive()
    blocked.join()


def test_a_new_group_starts_counting_again():
    turns = InTurn()
    ran, _ = run_all(turns, [PartnerWork(home=1, group="old", ask=None, number=0)])
    ran += run_all(turns, [PartnerWork(home=1, group="new", ask=None, number=0)])[0]
    assert ran == [(1, 0), (1, 0)]


def _serve_with_timeout(turns, work, timeout_s):
    with turns.turn(work, timeout_s):
        pass
