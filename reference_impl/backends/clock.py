"""The one wall-clock serving loop, for any engine with `add_request(seq) -> inst_id`, `has_work` and either
`step() -> finished` (the local engine, backends/local.py) or `collect(max_wait_s) -> finished` (the Ray engine,
whose instances step by themselves: it returns once one of them reported a step, or at the next arrival).

Each request joins the engine at its arrival time (between steps, as the simulator's instances pick up arrivals
at their next step), the engine steps while there is work, and the loop sleeps to the next arrival when idle.
The records are `serving/records.py`'s, as the simulator's are, so a real run and a simulated run summarise
alike. The engine must keep the `Sequence` objects it is given up to date (the local engine mutates them in place, the Ray
engine mirrors its actors' tokens into them).
"""
import time

from reference_impl.errors import InputError
from reference_impl.control.sequence import Sequence
from reference_impl.serving.records import FAILED, FINISHED, REJECTED, RequestRecord, ServingRun


class CpuClock:
    """This process's CPU time as the clock, idle time skipped: a run on a CPU shared with other work, timed as if
    the core were its own (time spent waiting for a core does not count). `sleep` advances it without waiting."""

    def __init__(self):
        self.skipped_s = 0.0

    def __call__(self) -> float:
        return time.process_time() + self.skipped_s

    def sleep(self, seconds: float) -> None:
        self.skipped_s += seconds


def make_clock(name: str):
    """(clock, sleep) of "wall" (time.perf_counter) or "cpu" (CpuClock)."""
    if name == "wall":
        return time.perf_counter, time.sleep
    if name == "cpu":
        clock = CpuClock()
        return clock, clock.sleep
    raise InputError(f"unknown clock {name!r}; choose wall or cpu")


CLOCKS = ("wall", "cpu")


def serve_on_clock(engine, requests, prompts: list[list[int]], *, time_limit_s: float,
                   clock=time.perf_counter, sleep=time.sleep) -> ServingRun:
    """Serve `requests` (req_id, arrival_s, prompt_len, output_len) with `prompts[i]` the token ids of
    requests[i]; each generates exactly its output_len tokens. A request the engine refuses (InputError) is
    rejected; those still running at `time_limit_s` stay unfinished, and those the engine gave up on (its
    `failed`: an instance died) are failed."""
    records = [RequestRecord(r.req_id, r.arrival_s, r.prompt_len, r.output_len) for r in requests]
    result = ServingRun(records)
    order = sorted(range(len(requests)), key=lambda i: (requests[i].arrival_s, requests[i].req_id))
    admitted: list[tuple[Sequence, RequestRecord]] = []
    live: dict[int, tuple[Sequence, RequestRecord]] = {}
    collect = getattr(engine, "collect", None)
    t0 = clock()
    next_i = 0
    while True:
        now_s = clock() - t0
        while next_i < len(order) and requests[order[next_i]].arrival_s <= now_s:
            i = order[next_i]
            next_i += 1
            seq = Sequence(requests[i].req_id, prompts[i], requests[i].output_len)
            try:
                records[i].inst_id = engine.add_request(seq)
            except InputError:
                records[i].status = REJECTED
                continue
            live[seq.req_id] = (seq, records[i])
            admitted.append(live[seq.req_id])
        if now_s > time_limit_s:
            break
        if not engine.has_work:
            if next_i == len(order):
                break
            sleep(max(0.0, requests[order[next_i]].arrival_s - now_s))
            continue
        before = sum(len(seq.output_ids) for seq, _ in live.values())
        if collect is None:
            finished = engine.step()
        else:
            next_s = requests[order[next_i]].arrival_s if next_i < len(order) else time_limit_s
            finished = collect(max(0.0, next_s - now_s))
        end_s = clock() - t0
        num_tokens = sum(len(seq.output_ids) for seq, _ in live.values()) - before
        if num_tokens:  # the timeline is of tokens; a Ray collection often brings none
            result.step_tokens.append(num_tokens)
            result.step_end_s.append(end_s)
            result.step_inst.append(-1)  # one engine step covers every instance
        for seq, record in live.values():
            if seq.output_ids and record.first_token_s is None:
                record.first_token_s = end_s
        for seq in finished:
            _, record = live.pop(seq.req_id)
            record.status, record.finish_s = FINISHED, end_s
    failed = getattr(engine, "failed", {})
    for seq, record in admitted:
        record.num_preemptions = seq.num_preemptions
        if seq.req_id in failed:
            record.status = FAILED
    result.num_steps = getattr(engine, "num_steps", len(result.step_end_s))
    result.end_s = clock() - t0
    return result
