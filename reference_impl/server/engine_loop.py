"""One thread owns the engine (a driver: drivers.py) and steps it; the server reaches it only through its inbox
(add, abort, inspect).

Continuous batching as the engine does it: a request added between two steps is dispatched at once and joins a
batch at the next step; after each step every request that made tokens gets them as an Event on its own asyncio
queue (put there thread-safely), so tokens stream as they are made. An abort takes effect between steps and frees
every rBlock the request held (Scheduler.abort). A failing step fails the requests in flight, never the thread:
the engine is built afresh and serving goes on.
"""
import asyncio
import logging
import queue
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass

from reference_impl.control.sequence import Sequence, Status
from reference_impl.errors import InputError
from reference_impl.server.drivers import EngineStats
from reference_impl.server.metrics import ServerMetrics

log = logging.getLogger("repro.serve")


@dataclass(slots=True)
class Event:
    """New tokens of one request; `finish_reason` set on its last event ("stop": EOS, "length", "abort", "error")."""
    token_ids: list[int]
    finish_reason: str | None = None
    error: str | None = None


@dataclass(slots=True, eq=False)
class _Live:
    seq: Sequence
    aloop: asyncio.AbstractEventLoop
    events: asyncio.Queue
    arrival_s: float
    sent: int = 0
    last_s: float = 0.0
    queued: bool = True  # counted in num_queued until its first token (or its end)


class EngineLoop:
    def __init__(self, make_driver, metrics: ServerMetrics, idle_wait_s: float = 0.05):
        """`make_driver()` builds the engine's driver (called here and after a failed step)."""
        self.make_driver = make_driver
        self.driver = make_driver()
        self.metrics = metrics
        self.idle_wait_s = idle_wait_s
        self.inbox: queue.SimpleQueue = queue.SimpleQueue()
        self.live: dict[int, _Live] = {}
        self._lock = threading.Lock()
        self.num_queued = 0  # submitted and without a first token yet (bounded admission reads it)
        self._remote_bytes_seen = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="engine-loop", daemon=True)

    # --- the server's side (any thread)
    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        self.inbox.put(("wake",))
        self._thread.join(timeout_s)
        self.driver.close()

    @property
    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def submit(self, seq: Sequence, arrival_s: float) -> asyncio.Queue:
        """Queue `seq` for the engine; its Events arrive on the returned queue (of the calling event loop)."""
        live = _Live(seq, asyncio.get_running_loop(), asyncio.Queue(), arrival_s)
        with self._lock:
            self.num_queued += 1
        self.inbox.put(("add", live))
        return live.events

    def abort(self, req_id: int, finished_reason: str | None = None) -> None:
        """Drop the request at the next step; `finished_reason` ("stop": a stop string) counts it as finished."""
        self.inbox.put(("abort", req_id, finished_reason))

    def call(self, fn) -> Future:
        """Run `fn(driver)` in the loop's thread between steps; its result in the Future."""
        done: Future = Future()
        self.inbox.put(("call", fn, done))
        return done

    def stats(self, timeout_s: float = 10.0) -> EngineStats:
        return self.call(lambda driver: driver.stats(len(self.live))).result(timeout_s)

    # --- the loop's thread
    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._drain(block=not self.driver.has_work)
                if self.driver.has_work:
                    self._step()
                self._gauges()
            except Exception:  # the thread must outlive any one failure (a failed step is handled in _step)
                log.exception("engine loop: an iteration failed; serving goes on")
                time.sleep(self.idle_wait_s)

    def _drain(self, block: bool) -> None:
        try:
            message = self.inbox.get(timeout=self.idle_wait_s) if block else self.inbox.get_nowait()
        except queue.Empty:
            return
        while True:
            self._handle(message)
            try:
                message = self.inbox.get_nowait()
            except queue.Empty:
                return

    def _handle(self, message) -> None:
        kind = message[0]
        if kind == "add":
            live = message[1]
            try:
                self.driver.add(live.seq)
            except InputError as exc:
                self._end(live, Event([], "error", str(exc)))
                return
            self.live[live.seq.req_id] = live
        elif kind == "abort":
            live = self.live.get(message[1])
            if live is not None:
                self.driver.abort(live.seq.req_id)
                if message[2] is None:
                    self.metrics.aborted.inc()
                else:
                    self.metrics.e2e.observe(time.monotonic() - live.arrival_s)
                    self.metrics.request_generation.observe(live.sent)
                    self.metrics.finished(message[2])
                self._end(live, Event([], "abort"))
        elif kind == "call":
            _, fn, done = message
            try:
                done.set_result(fn(self.driver))
            except Exception as exc:  # the caller's function: its error is the caller's
                done.set_exception(exc)

    def _step(self) -> None:
        try:
            self.metrics.gmanager_rounds.inc(self.driver.step())
        except Exception:
            log.exception("an engine step failed: failing the %d requests in flight and rebuilding the engine",
                          len(self.live))
            for live in list(self.live.values()):
                self._end(live, Event([], "error", "the engine failed while serving this request"))
            self.driver.close()
            self.driver = self.make_driver()
            self._remote_bytes_seen = 0
            return
        self.metrics.steps.inc()
        now = time.monotonic()
        for req_id, why in self.driver.failed().items():
            if req_id in self.live:  # given up by the engine (a Ray instance died and it no longer fits)
                why = f"the engine failed while serving this request: {why}"
                self._end(self.live[req_id], Event([], "error", why))
        for live in list(self.live.values()):
            seq = live.seq
            n = len(seq.output_ids)
            if n == live.sent:
                continue
            new = seq.output_ids[live.sent:n]
            if live.sent == 0:
                self.metrics.ttft.observe(now - live.arrival_s)
                self.metrics.queue_time.observe(now - live.arrival_s)
                self.metrics.prompt_tokens.inc(seq.num_prompt_tokens)
                self.metrics.request_prompt.observe(seq.num_prompt_tokens)
            else:
                for _ in new:
                    self.metrics.itl.observe((now - live.last_s) / len(new))
            self.metrics.generation_tokens.inc(len(new))
            live.sent, live.last_s = n, now
            if seq.status is Status.FINISHED:
                eos = seq.eos_token_id is not None and seq.output_ids[-1] == seq.eos_token_id
                reason = "stop" if eos else "length"
                self.metrics.e2e.observe(now - live.arrival_s)
                self.metrics.request_generation.observe(n)
                self.metrics.finished(reason)
                self._end(live, Event(new, reason))
            else:
                self._unqueue(live)
                self._send(live, Event(new))

    def _unqueue(self, live: _Live) -> None:
        if live.queued:
            live.queued = False
            with self._lock:
                self.num_queued -= 1

    def _end(self, live: _Live, event: Event) -> None:
        self.live.pop(live.seq.req_id, None)
        self.driver.release(live.seq.req_id)
        self._unqueue(live)
        self._send(live, event)

    @staticmethod
    def _send(live: _Live, event: Event) -> None:
        try:
            live.aloop.call_soon_threadsafe(live.events.put_nowait, event)
        except RuntimeError:  # its event loop closed (the server is shutting down)
            pass

    def _gauges(self) -> None:
        g, m = self.driver.gauges(), self.metrics
        m.running.set(g.num_running)
        m.waiting.set(g.num_waiting)
        m.rblocks_used.set(g.rblocks_used)
        m.kv_usage.set(g.rblocks_used / g.rblocks_capacity if g.rblocks_capacity else 0.0)
        m.lent.set(g.rblocks_lent)
        m.borrowed.set(g.rblocks_borrowed)
        m.remote_attention_bytes.inc(g.remote_attention_bytes - self._remote_bytes_seen)
        self._remote_bytes_seen = g.remote_attention_bytes
