"""Held under load: concurrent clients send good requests (streamed or not, text or ids), cancel some mid-stream,
send malformed and over-long ones; the server stays up, every good request gets the greedy tokens of generate()
on the same model, and afterwards nothing runs and no rBlock is held."""
import asyncio
import json

import httpx
import numpy as np

from reference_impl.backends.local import generate
from reference_impl.control.engine import EngineConfig
from server_helpers import assert_nothing_held, wait_idle

NUM_REQUESTS = 240
NUM_CLIENTS = 12
MAX_NEW = 24  # good requests ask for a prefix of this many greedy tokens
# 2 instances of 16 rBlocks: long prompts borrow, the batch fills, requests queue
CONFIG = {"num_instances": 2, "blocks_per_instance": 16, "block_size": 16, "max_batch_size": 8}
BAD = [b'{"prompt": [1, 2', json.dumps({"prompt": [1, 2], "max_tokens": -5}).encode(),
       json.dumps({"prompt": [1, 2], "max_tokens": "x"}).encode(), json.dumps({"max_tokens": 2}).encode(),
       json.dumps({"model": "other", "prompt": [1]}).encode(), json.dumps({"prompt": [1, 10**6]}).encode(),
       json.dumps({"prompt": [3] * 600, "max_tokens": 4}).encode(),  # longer than the cluster holds (512)
       json.dumps({"prompt": [3] * 100, "max_tokens": 10**9}).encode()]


def _plan(tokenizer, seed=0):
    rng = np.random.default_rng(seed)
    words = "the cache of every instance lends blocks to a busy request while others wait".split()
    plan = []
    for i in range(NUM_REQUESTS):
        kind = rng.choice(["good", "cancel", "bad"], p=[0.65, 0.15, 0.2])
        if kind == "good":
            if rng.random() < 0.3:
                text = " ".join(rng.choice(words, size=int(rng.integers(1, 20))))
                prompt, ids = text, tokenizer.encode(text)
            else:
                ids = rng.integers(2, 512, int(rng.integers(1, 120))).tolist()
                prompt = ids
            plan.append(("good", {"model": "tiny", "prompt": prompt, "temperature": 0, "return_token_ids": True,
                                  "max_tokens": int(rng.choice([1, 5, 12, MAX_NEW])),
                                  "stream": bool(rng.random() < 0.5)}, ids))
        elif kind == "cancel":
            plan.append(("cancel", {"model": "tiny", "prompt": rng.integers(2, 512, 40).tolist(), "max_tokens": 300,
                                    "ignore_eos": True, "stream": True, "temperature": 0}, None))
        else:
            plan.append(("bad", BAD[int(rng.integers(len(BAD)))], None))
    return plan


async def _send(client, kind, body):
    if kind == "bad":
        r = await client.post("/v1/completions", content=body, headers={"content-type": "application/json"})
        return r.status_code, r.json()
    if kind == "cancel":
        async with client.stream("POST", "/v1/completions", json=body) as r:
            n = 0
            async for line in r.aiter_lines():
                n += line.startswith("data: {")
                if n == 2:
                    return r.status_code, None  # leaving the block closes the connection mid-stream
        return r.status_code, "finished"
    if not body["stream"]:
        r = await client.post("/v1/completions", json=body)
        return r.status_code, r.json()["choices"][0]["token_ids"]
    ids = []
    async with client.stream("POST", "/v1/completions", json=body) as r:
        async for line in r.aiter_lines():
            if line.startswith("data: {"):
                ids += json.loads(line[6:])["choices"][0]["token_ids"]
    return r.status_code, ids


async def _clients(base_url, plan):
    queue = asyncio.Queue()
    for i in range(len(plan)):
        queue.put_nowait(i)
    results = [None] * len(plan)

    async def client_loop():
        async with httpx.AsyncClient(base_url=base_url, timeout=60) as client:
            while not queue.empty():
                i = queue.get_nowait()
                results[i] = await _send(client, plan[i][0], plan[i][1])

    await asyncio.gather(*(client_loop() for _ in range(NUM_CLIENTS)))
    return results


def test_soak(start_server, tiny_model, tiny_tokenizer):
    server = start_server(**CONFIG, max_queue=1000)
    plan = _plan(tiny_tokenizer)
    results = asyncio.run(_clients(server.base_url, plan))

    good = [i for i, p in enumerate(plan) if p[0] == "good"]
    expected = generate(tiny_model, [plan[i][2] for i in good], MAX_NEW,
                        EngineConfig(num_instances=1, blocks_per_instance=1024, block_size=16)).token_ids
    for i, want in zip(good, expected):
        status, ids = results[i]
        assert status == 200 and ids == want[:plan[i][1]["max_tokens"]], i
    for i, (kind, body, _) in enumerate(plan):
        if kind == "bad":
            assert results[i][0] == (404 if b'"other"' in body else 400) and "error" in results[i][1], body
        if kind == "cancel":
            assert results[i] == (200, None)
    assert_nothing_held(wait_idle(server))
    metrics = httpx.get(server.base_url + "/metrics").text
    cancelled = sum(p[0] == "cancel" for p in plan)
    aborted = next(float(line.split()[-1]) for line in metrics.splitlines()
                   if line.startswith("infinite_llm:requests_aborted_total{"))
    assert aborted == cancelled
    assert httpx.get(server.base_url + "/health").status_code == 200
    assert min(len(good), cancelled, NUM_REQUESTS - len(good) - cancelled) >= 30
