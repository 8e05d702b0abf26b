"""The messages of one instance's loop thread, the only thread that reads or changes its control plane.

Peers (their requests for reservations, blocks, table entries), the gManager (`move_kvcache`, swaps) and the
driver (arrivals, aborts, pauses) put messages here from Ray's actor threads; the loop runs them at its control
phase, at every layer boundary and whenever it waits (on a peer's reply, a data-plane transfer, a pause). A loop
that waits on a peer keeps answering its own mail, so two loops asking each other never deadlock; a message
runs between two calls of the control plane, as a nested call would in the local backend.
"""
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future

POLL_S = 0.0005  # how long a waiting loop sleeps on its mailbox before it looks at what it waits for again
# a loop with nothing to run, held, or waiting for what only mail brings looks this often (mail wakes it at once;
# an idle loop still heartbeats at about this period)
IDLE_WAIT_S = 0.02


def _nothing() -> None:
    pass


class Mailbox:
    def __init__(self):
        self.queue: queue.SimpleQueue = queue.SimpleQueue()
        self.owner: int | None = None  # thread id of the loop, set when it starts
        self.lock = threading.Lock()
        self.next_seq: dict[int, int] = {}  # sender -> number of its next message to let in
        self.early: dict[tuple[int, int], tuple] = {}  # (sender, seq) -> a message that overtook an earlier one

    def call(self, fn: Callable, *args):
        """Run `fn(*args)` on the loop thread and return its result (from any other thread)."""
        if threading.get_ident() == self.owner:
            return fn(*args)
        future = Future()
        self.queue.put((fn, args, future))
        return future.result()

    def post(self, fn: Callable, *args) -> None:
        """Run `fn(*args)` on the loop thread later; no reply."""
        self.queue.put((fn, args, None))

    def wake(self) -> None:
        """Let a loop waiting on its mailbox look again (something it reads elsewhere changed, e.g. its inbox)."""
        self.queue.put((_nothing, (), None))

    def deliver(self, sender: int, seq: int, fn: Callable, args: tuple, future: Future | None) -> None:
        """A peer's message number `seq`: let in once every earlier one of that sender is (Ray runs the calls of a
        threaded actor in any order)."""
        with self.lock:
            self.early[(sender, seq)] = (fn, args, future)
            nxt = self.next_seq.get(sender, 0)
            while (sender, nxt) in self.early:
                self.queue.put(self.early.pop((sender, nxt)))
                nxt += 1
            self.next_seq[sender] = nxt

    def serve(self, timeout_s: float = 0.0) -> None:
        """On the loop thread: run every waiting message (waiting up to `timeout_s` for the first)."""
        try:
            item = self.queue.get(timeout=timeout_s) if timeout_s > 0 else self.queue.get_nowait()
        except queue.Empty:
            return
        while True:
            fn, args, future = item
            try:
                result = fn(*args)
            except BaseException as err:  # noqa: BLE001 (the caller re-raises it)
                if future is None:
                    raise
                future.set_exception(err)
            else:
                if future is not None:
                    future.set_result(result)
            try:
                item = self.queue.get_nowait()
            except queue.Empty:
                return

    def wait(self, done: Callable[[], bool], timeout_s: float | None = None, poll_s: float = POLL_S) -> bool:
        """On the loop thread: serve mail until `done()`; False when `timeout_s` passed first. `poll_s`: how long it
        sleeps on the mailbox between looks (longer where only mail can make `done()` true)."""
        deadline = None if timeout_s is None else time.perf_counter() + timeout_s
        while not done():
            if deadline is not None and time.perf_counter() > deadline:
                return False
            self.serve(poll_s)
        return True

    def sleep(self, seconds: float) -> None:
        """On the loop thread: let `seconds` pass, serving mail meanwhile."""
        end = time.perf_counter() + seconds
        while (left := end - time.perf_counter()) > 0:
            self.serve(left)  # mail ends the wait at once; nothing else needs a look before `end`
