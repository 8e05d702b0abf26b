"""A client that goes away aborts its request at the next step, and every rBlock it held, local or borrowed, is
freed (streaming: the response is cancelled; non-streaming: the handler sees the disconnect)."""
import time

import httpx

from reference_impl.model.device_time import DeviceTimeModel
from reference_impl.server.config import ServedModel, ServerConfig, max_model_len

from server_helpers import assert_nothing_held, wait_idle

# 2 instances of 8 rBlocks of 16 tokens: a request of 100 + 150 tokens must borrow from the other instance
SMALL = {"num_instances": 2, "blocks_per_instance": 8, "block_size": 16}
LONG = {"model": "tiny", "prompt": [(7 * i) % 500 + 2 for i in range(100)], "max_tokens": 150, "temperature": 0,
        "ignore_eos": True}


def _counter(server, name):
    for line in httpx.get(server.base_url + "/metrics").text.splitlines():
        if line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not in /metrics")


def test_stream_disconnect_frees_borrowed_blocks(start_server):
    server = start_server(**SMALL)
    borrowed = 0
    with httpx.Client(base_url=server.base_url, timeout=30) as client:
        with client.stream("POST", "/v1/completions", json=LONG | {"stream": True}) as r:
            assert r.status_code == 200
            for n, line in enumerate(r.iter_lines()):
                if line.startswith("data: {") and n % 4 == 0:
                    borrowed = max(borrowed, server.server.loop.stats().rblocks_borrowed)
                if borrowed:
                    break  # and close the connection mid-stream
    assert borrowed > 0, "the request never borrowed: the test's budget is too roomy"
    assert_nothing_held(wait_idle(server))
    assert _counter(server, "infinite_llm:requests_aborted_total") == 1
    assert _counter(server, "infinite_llm:rblocks_borrowed") == 0
    # decode steps over borrowed rBlocks exchanged queries and partial results: per layer and remote holder,
    # q and out (heads x head_dim fp32) and lse (heads fp32) of the tiny model (4 layers, 8 heads of 16)
    remote = _counter(server, "infinite_llm:remote_attention_bytes_total")
    assert remote > 0 and remote % (4 * (2 * 8 * 16 * 4 + 8 * 4)) == 0
    # the server serves the same request to the end afterwards
    done = httpx.post(server.base_url + "/v1/completions", json=LONG, timeout=60).json()
    assert done["usage"]["completion_tokens"] == 150


def test_non_streaming_disconnect_aborts(start_server, tiny_model, tiny_tokenizer):
    # each step takes at least 10 ms (device-time.py): 150 tokens outlast the client's 0.3 s
    config = ServerConfig(**SMALL)
    slow = ServedModel("tiny", DeviceTimeModel(0.01, tiny_model), tiny_tokenizer, None,
                       max_model_len(config.engine_run()))
    server = start_server(served=slow, **SMALL)
    t0 = time.monotonic()
    try:
        httpx.post(server.base_url + "/v1/completions", json=LONG, timeout=0.3)
        raise AssertionError("the request finished before the client gave up: make it longer")
    except httpx.TimeoutException:
        pass
    assert_nothing_held(wait_idle(server))
    assert _counter(server, "infinite_llm:requests_aborted_total") == 1
    assert time.monotonic() - t0 < 5
