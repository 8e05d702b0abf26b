"""One writer for each piece of an instance loop's state: its loop thread. An actor call (the driver's, the
gManager's, a partner step's end) posts a message that the loop thread applies; a write from any other thread
raises instead of racing; the driver's results call reads only what the loop put out. No Ray is started: the
actor's methods run on this test's thread, as they would on one of Ray's."""
import threading
import time

import pytest

pytest.importorskip("ray")

import torch  # noqa: E402

from reference_impl.backends.local import LocalBackend  # noqa: E402
from reference_impl.backends.ray.snapshot import Snapshot
from reference_impl.backends.ray.actor import InstanceActor, PeerRequests  # noqa: E402
from reference_impl.backends.ray.dataplane import GroupSpec  # noqa: E402
from reference_impl.backends.ray.loop import InstanceLoop  # noqa: E402
from reference_impl.backends.ray.messages import Abort, AddRequest, Outbox, Report  # noqa: E402
from reference_impl.backends.ray.owned import ForeignWrite  # noqa: E402
from reference_impl.backends.ray.serve import InTurn, PartnerWork  # noqa: E402
from reference_impl.control.engine import EngineConfig  # noqa: E402
from reference_impl.model.llama import TINY, random_model  # noqa: E402
from reference_impl.control.protocol import MoveKVCache  # noqa: E402
from reference_impl.control.sequence import Sequence  # noqa: E402

MODEL = random_model(TINY, seed=3)
CONFIG = EngineConfig(1, 8, block_size=4)
CPU = torch.device("cpu")


def make_loop() -> InstanceLoop:
    caches = LocalBackend(MODEL, CONFIG, CPU, inst_ids=[0]).caches
    return InstanceLoop(0, CONFIG, MODEL, {tier: kv for (_, tier), kv in caches.items()}, CPU, None, {0: None})


def bare_actor(loop: InstanceLoop):
    """The instance actor's own class around `loop`, outside Ray."""
    actor = object.__new__(InstanceActor.__ray_actor_class__)
    actor.inst_id, actor.loop, actor.requests, actor.turns = 0, loop, PeerRequests(loop), InTurn()
    return actor


def test_actor_calls_post_messages_that_the_loop_thread_applies():
    loop = make_loop()
    claimed = threading.Event()

    def loop_thread():  # the loop reduced to its mailbox
        loop.claim()
        claimed.set()
        loop.mailbox.wait(lambda: loop.stopping, timeout_s=30)

    thread = threading.Thread(target=loop_thread)
    thread.start()
    claimed.wait()
    actor = bare_actor(loop)
    actor.add_request(Sequence(0, [1, 2, 3], 4))
    actor.abort(5)
    actor.move_kvcache(MoveKVCache(0, 1, 1))
    actor.serve(PartnerWork(home=1, group="g", ask=None))  # no data plane here: only its statistics
    actor.reform(GroupSpec("127.0.0.1:1", (0,), "gloo", 1.0), [1], [])
    assert actor.entries() == []  # a question answered by the loop thread
    actor.stop()
    thread.join(timeout=30)
    assert not thread.is_alive()
    assert loop.stopping and loop.stats.num_served == 1
    assert loop.reform.dead == [1] and loop.snapshot.state == "reforming"
    # arrivals, aborts and the gManager's instructions wait for the next control phase, in the order sent
    assert [type(m) for m in loop.inbox] == [AddRequest, Abort, MoveKVCache]


def test_a_write_from_another_thread_than_the_loops_raises():
    loop = make_loop()
    thread = threading.Thread(target=loop.claim)
    thread.start()
    thread.join()
    writes = {"stop flag": lambda: setattr(loop, "stopping", True),
              "snapshot": lambda: setattr(loop, "snapshot", Snapshot(state="reforming")),
              "statistics": lambda: setattr(loop.stats, "num_served", loop.stats.num_served + 1),
              "holds": lambda: setattr(loop.holds, "events", []),
              "gManager link": lambda: setattr(loop.link, "full", True),
              "step": lambda: setattr(loop.exchange, "serving", [])}
    for what, write in writes.items():
        with pytest.raises(ForeignWrite):
            write()
    assert not loop.stopping and loop.stats.num_served == 0 and loop.snapshot == Snapshot()
    published = loop.stats.copy()  # what the loop publishes is anyone's to read and change
    published.num_served += 1
    assert published.num_served == 1 and loop.stats.num_served == 0


def test_the_results_call_merges_the_loops_reports_in_order_and_wakes_on_a_failure():
    outbox = Outbox()
    outbox.put(Report({1: (0, [5, 6])}, []))
    outbox.put(Report({1: (2, [7]), 2: (0, [9])}, [(2, {0: 1}, 0)]))
    assert outbox.take(10.0, lambda: False) == ({1: (0, [5, 6, 7]), 2: (0, [9])}, [(2, {0: 1}, 0)])
    t0 = time.perf_counter()
    assert outbox.take(0.05, lambda: False) == ({}, []) and time.perf_counter() - t0 >= 0.05
    t0 = time.perf_counter()
    assert outbox.take(10.0, lambda: True) == ({}, []) and time.perf_counter() - t0 < 1.0  # broken: no wait
    timer = threading.Timer(0.05, outbox.wake)  # the loop breaks while the driver's call waits
    timer.start()
    t0 = time.perf_counter()
    assert outbox.take(10.0, lambda: False) == ({}, []) and time.perf_counter() - t0 < 5.0
    timer.join()
