"""The instance loop's mailbox: a peer's messages run in the order that peer sent them, whatever order Ray's
threads deliver them in; a call from another thread gets the loop thread's answer (or its exception); a loop
that waits keeps answering its mail, so two loops asking each other at once both get their answers."""
import threading
import time

import pytest

from reference_impl.backends.ray.mailbox import Mailbox


def test_messages_of_one_sender_run_in_the_order_sent_whatever_order_they_arrive_in():
    box, ran = Mailbox(), []
    for sender, seq in [(7, 2), (7, 0), (9, 1), (9, 0), (7, 1), (7, 4)]:
        box.deliver(sender, seq, ran.append, ((sender, seq),), None)
    box.serve()
    assert [r for r in ran if r[0] == 7] == [(7, 0), (7, 1), (7, 2)]  # (7, 4) waits for (7, 3)
    assert [r for r in ran if r[0] == 9] == [(9, 0), (9, 1)]
    box.deliver(7, 3, ran.append, ((7, 3),), None)
    box.serve()
    assert ran[-2:] == [(7, 3), (7, 4)]


def test_a_call_from_another_thread_runs_on_the_loop_thread_and_returns_or_raises():
    box, stop = Mailbox(), threading.Event()
    loop = threading.Thread(target=lambda: box.wait(stop.is_set))
    loop.start()
    box.owner = loop.ident
    try:
        assert box.call(threading.get_ident) == loop.ident
        with pytest.raises(ZeroDivisionError):
            box.call(lambda: 1 / 0)
    finally:
        stop.set()
        loop.join()
    box.owner = threading.get_ident()
    assert box.call(lambda: 5) == 5  # on the owner's own thread a call runs at once


def test_two_loops_waiting_on_each_other_both_get_their_answers():
    a, b = Mailbox(), Mailbox()
    answers = {}

    def run(me, other, name):
        me.owner = threading.get_ident()
        done = threading.Event()
        # a call to the other loop made without blocking this one: this loop serves its own mail while it waits
        threading.Thread(target=lambda: (answers.setdefault(name, other.call(lambda: name + "!")), done.set())).start()
        assert me.wait(done.is_set, timeout_s=10)
        me.wait(lambda: len(answers) == 2, timeout_s=10)  # keep serving until the other loop is answered too

    threads = [threading.Thread(target=run, args=(a, b, "a")), threading.Thread(target=run, args=(b, a, "b"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=20)
    assert answers == {"a": "a!", "b": "b!"}


def test_a_wait_that_only_mail_ends_looks_rarely_and_wakes_at_once_on_mail():
    """A held loop waits with a long poll (only mail lets it go on): it looks at its condition a few times a
    second, not 2000, and a message still ends the wait at once."""
    box, released, looks = Mailbox(), [], []

    def done():
        looks.append(1)
        return bool(released)

    assert not box.wait(done, timeout_s=0.2, poll_s=0.05)
    assert len(looks) <= 6  # 0.2 s at one look per 0.05 s, and the first
    waiter = threading.Thread(target=lambda: box.wait(done, poll_s=10.0))
    waiter.start()
    box.post(released.append, True)
    waiter.join(timeout=2.0)
    assert not waiter.is_alive()  # the message woke it long before its 10 s poll


def test_device_time_passes_on_one_wait_that_mail_still_interrupts():
    """A device-time step's wait blocks on the mailbox until its end (it used to look every 2 ms), runs a message
    that comes meanwhile at once, and still lasts its whole time."""
    box, ran, serves = Mailbox(), [], []
    serve = box.serve
    box.serve = lambda timeout_s=0.0: serves.append(timeout_s) or serve(timeout_s)
    threading.Timer(0.1, lambda: box.post(lambda: ran.append(time.perf_counter()))).start()
    t0 = time.perf_counter()
    box.sleep(0.3)
    assert time.perf_counter() - t0 >= 0.3
    assert len(ran) == 1 and ran[0] - t0 < 0.2  # run when it came, not at the end
    assert len(serves) <= 4  # before and after the message (150 looks at one per 2 ms)
