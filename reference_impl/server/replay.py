"""Replay requests (workloads.Request: arrival, prompt and output lengths) against any OpenAI-compatible endpoint
with streaming, as `vllm bench serve --backend openai` does: each request at its arrival time, a token-id prompt of
its length, max_tokens its output length with ignore_eos, temperature 0. TTFT is the time to the first chunk with
choices, ITL the gaps between chunks, the output length usage.completion_tokens, TPOT (e2e - TTFT) / (output - 1).
The run is a ServingRun (reference_impl/serving/records.py), so it summarises as the simulator's runs do; the
chunks' arrival times are its token timeline."""
import asyncio
import json
import math
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from reference_impl.serving.records import FAILED, FINISHED, REJECTED, RequestRecord, ServingRun

PROMPT_TOKEN_RANGE = (10, 500)  # token ids of the replayed prompts: inside any vocabulary of 512 or more


@dataclass(frozen=True, slots=True)
class Endpoint:
    base_url: str  # e.g. http://127.0.0.1:8000 (the /v1 is added)
    model: str
    api_key: str | None = None
    timeout_s: float = 600.0


@dataclass(frozen=True, slots=True)
class Slo:
    """A request is good when it meets every bound given (vllm bench serve's --goodput)."""
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2e_ms: float | None = None

    def met(self, ttft_s: float, tpot_s: float | None, e2e_s: float) -> bool:
        return ((self.ttft_ms is None or 1e3 * ttft_s <= self.ttft_ms)
                and (self.tpot_ms is None or tpot_s is None or 1e3 * tpot_s <= self.tpot_ms)
                and (self.e2e_ms is None or 1e3 * e2e_s <= self.e2e_ms))


@dataclass(slots=True)
class Replayed:
    run: ServingRun
    itl_s: list[float] = field(default_factory=list)  # every gap between two chunks of a request
    errors: list[str] = field(default_factory=list)  # one line per request that failed (status and message)


def prompt_ids(requests, seed: int) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(*PROMPT_TOKEN_RANGE, r.prompt_len).tolist() for r in requests]


async def _one(client, endpoint: Endpoint, record: RequestRecord, prompt: list[int], t0: float, out: Replayed,
               chunks_s: list) -> None:
    body = {"model": endpoint.model, "prompt": prompt, "max_tokens": record.output_len, "temperature": 0.0,
            "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}
    times, usage = [], None
    try:
        async with client.stream("POST", "/v1/completions", json=body) as r:
            if r.status_code != 200:
                text = (await r.aread()).decode(errors="replace")
                record.status = REJECTED if r.status_code in (400, 413, 422, 503) else FAILED
                out.errors.append(f"request {record.req_id}: HTTP {r.status_code} {text[:200]}")
                return
            async for line in r.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                data = json.loads(line[6:])
                if "error" in data:
                    raise RuntimeError(data["error"].get("message", "error chunk"))
                if data.get("choices"):
                    times.append(time.perf_counter() - t0)
                if data.get("usage"):
                    usage = data["usage"]
    except Exception as exc:  # a failed request is recorded, never the end of the run
        record.status = FAILED
        out.errors.append(f"request {record.req_id}: {type(exc).__name__}: {exc}")
        return
    if not times:
        record.status = FAILED
        out.errors.append(f"request {record.req_id}: no token came")
        return
    n = int(usage["completion_tokens"]) if usage else len(times)
    record.status, record.first_token_s, record.finish_s, record.output_len = FINISHED, times[0], times[-1], n
    out.itl_s += list(np.diff(times))
    # the token timeline: one token per chunk, what usage counts beyond the chunks on the last one
    chunks_s += [(t, 1) for t in times[:-1]] + [(times[-1], max(1, n - len(times) + 1))]


async def replay_async(endpoint: Endpoint, requests, prompts: list[list[int]]) -> Replayed:
    import httpx

    records = [RequestRecord(r.req_id, r.arrival_s, r.prompt_len, r.output_len) for r in requests]
    out, chunks_s = Replayed(ServingRun(records)), []
    headers = {"Authorization": f"Bearer {endpoint.api_key}"} if endpoint.api_key else {}
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=64)
    async with httpx.AsyncClient(base_url=endpoint.base_url.rstrip("/"), headers=headers, limits=limits,
                                 timeout=endpoint.timeout_s) as client:
        t0 = time.perf_counter()
        tasks = []
        for i in sorted(range(len(records)), key=lambda i: records[i].arrival_s):
            wait_s = records[i].arrival_s - (time.perf_counter() - t0)
            if wait_s > 0:
                await asyncio.sleep(wait_s)
            tasks.append(asyncio.create_task(_one(client, endpoint, records[i], prompts[i], t0, out, chunks_s)))
        await asyncio.gather(*tasks)
        out.run.end_s = time.perf_counter() - t0
    chunks_s.sort()
    out.run.step_end_s = [t for t, _ in chunks_s]
    out.run.step_tokens = [n for _, n in chunks_s]
    out.run.step_inst = [-1] * len(chunks_s)
    out.run.num_steps = len(chunks_s)
    return out


def replay(endpoint: Endpoint, requests, prompts: list[list[int]]) -> Replayed:
    """replay_async on an event loop of its own thread (the caller may be inside one, as the curves' sweep is)."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, replay_async(endpoint, requests, prompts)).result()


def _pcts(values_s) -> dict:
    if not len(values_s):
        return {"p50": None, "p99": None, "mean": None}
    arr = 1e3 * np.asarray(values_s, dtype=float)
    return {"p50": float(np.percentile(arr, 50)), "p99": float(np.percentile(arr, 99)), "mean": float(arr.mean())}


def latency_report(replayed: Replayed, slo: Slo) -> dict:
    """TTFT, TPOT, ITL and e2e (ms: p50, p99, mean), output tok/s over the run and goodput under `slo`."""
    done = [r for r in replayed.run.requests if r.status == FINISHED]
    ttft = [r.first_token_s - r.arrival_s for r in done]
    tpot = [(r.finish_s - r.first_token_s) / (r.output_len - 1) if r.output_len > 1 else None for r in done]
    e2e = [r.finish_s - r.arrival_s for r in done]
    duration_s = replayed.run.end_s
    good = sum(slo.met(a, b, c) for a, b, c in zip(ttft, tpot, e2e))
    out_tokens = sum(r.output_len for r in done)
    return {"num_finished": len(done), "num_errors": len(replayed.errors), "duration_s": duration_s,
            "ttft_ms": _pcts(ttft), "tpot_ms": _pcts([t for t in tpot if t is not None]),
            "itl_ms": _pcts(replayed.itl_s), "e2e_ms": _pcts(e2e),
            "output_tok_s": out_tokens / duration_s if duration_s > 0 else 0.0,
            "goodput_req_s": good / duration_s if duration_s > 0 else 0.0,
            "good_fraction": good / len(replayed.run.requests) if replayed.run.requests else 0.0,
            "first_errors": replayed.errors[:3]}


def finite_rate(rate_per_s: float) -> float | str:
    """A rate as strict JSON holds it: "inf" for a burst (every request at once; float() reads it back)."""
    return "inf" if math.isinf(rate_per_s) else rate_per_s
