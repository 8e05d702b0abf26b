"""Bad requests get the OpenAI error shape with the right status, and the server keeps serving; 503 with
Retry-After past --max-queue; the metrics carry vLLM's names."""
import threading
import time

import httpx
import pytest

from reference_impl.server.config import ServedModel
from reference_impl.model.tokenizer import TextTokenizer
from server_helpers import assert_nothing_held, wait_idle

GOOD = {"model": "tiny", "prompt": [5, 6, 7], "max_tokens": 3, "temperature": 0}


def _post(server, path, **kwargs):
    return httpx.post(server.base_url + path, timeout=30, **kwargs)


@pytest.mark.parametrize("path,kwargs,status,param", [
    ("/v1/completions", {"content": b'{"prompt": [1, 2', "headers": {"content-type": "application/json"}}, 400, None),
    ("/v1/completions", {"json": [1, 2]}, 400, None),
    ("/v1/completions", {"json": {"model": "tiny", "max_tokens": 3}}, 400, "prompt"),
    ("/v1/completions", {"json": GOOD | {"max_tokens": "three"}}, 400, "max_tokens"),
    ("/v1/completions", {"json": GOOD | {"max_tokens": -4}}, 400, "max_tokens"),
    ("/v1/completions", {"json": GOOD | {"max_tokens": 0}}, 400, "max_tokens"),
    ("/v1/completions", {"json": GOOD | {"max_tokens": 10**12}}, 400, "max_tokens"),
    ("/v1/completions", {"json": GOOD | {"prompt": [3] * 5000}}, 400, "max_tokens"),  # longer than the cluster holds
    ("/v1/completions", {"json": GOOD | {"prompt": [3, 99999]}}, 400, "prompt"),
    ("/v1/completions", {"json": GOOD | {"prompt": []}}, 400, "prompt"),
    ("/v1/completions", {"json": GOOD | {"prompt": ["a", "b"]}}, 400, "prompt"),
    ("/v1/completions", {"json": GOOD | {"temperature": -1}}, 400, None),
    ("/v1/completions", {"json": GOOD | {"top_p": 0}}, 400, None),
    ("/v1/completions", {"json": GOOD | {"logprobs": 2}}, 400, "logprobs"),
    ("/v1/completions", {"json": GOOD | {"n": 3}}, 400, "n"),
    ("/v1/completions", {"json": GOOD | {"stream": "yes"}}, 400, "stream"),
    ("/v1/completions", {"json": GOOD | {"model": "gpt-9"}}, 404, "model"),
    ("/v1/chat/completions", {"json": {"model": "tiny", "messages": []}}, 400, "messages"),
    ("/v1/chat/completions", {"json": {"model": "tiny", "messages": [{"role": "robot", "content": "x"}]}}, 400,
     "messages"),
    ("/v1/chat/completions", {"json": {"model": "tiny", "messages": [{"role": "user", "content": "x"}],
                                       "logprobs": True}}, 400, "logprobs"),
    ("/detokenize", {"json": {"tokens": [1, -3]}}, 400, "tokens"),
])
def test_bad_request_status_and_shape(shared_server, path, kwargs, status, param):
    r = _post(shared_server, path, **kwargs)
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert error["code"] == status and error["type"] == {400: "BadRequestError", 404: "NotFoundError"}[status]
    assert isinstance(error["message"], str) and error["message"] and error["param"] == param
    # and the server goes on serving
    assert _post(shared_server, "/v1/completions", json=GOOD).json()["usage"]["completion_tokens"] >= 1


def test_chat_without_template_is_400(start_server, tiny_model, tiny_tokenizer):
    bare = TextTokenizer(tiny_tokenizer.tokenizer, None, "<s>", "</s>")
    server = start_server(served=ServedModel("tiny", tiny_model, bare, None, 1024))
    r = _post(server, "/v1/chat/completions", json={"model": "tiny", "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 400 and "chat template" in r.json()["error"]["message"]
    assert _post(server, "/v1/completions", json=GOOD | {"prompt": "hi"}).status_code == 200


def test_503_past_the_queue_then_serves(start_server):
    server = start_server(max_queue=1)
    gate = threading.Event()
    paused = server.server.loop.call(lambda engine: gate.wait(30))  # the loop's thread waits: nothing is stepped
    first = {}
    t = threading.Thread(target=lambda: first.update(r=_post(server, "/v1/completions", json=GOOD)))
    t.start()
    while server.server.loop.num_queued < 1:
        time.sleep(0.005)
    refused = _post(server, "/v1/completions", json=GOOD)
    assert refused.status_code == 503 and refused.headers["retry-after"] == "1"
    assert refused.json()["error"]["code"] == 503
    gate.set()
    paused.result(10)
    t.join(30)
    assert first["r"].status_code == 200
    assert _post(server, "/v1/completions", json=GOOD).status_code == 200
    assert 'infinite_llm:requests_rejected_total{model_name="tiny"} 1.0' in httpx.get(server.base_url + "/metrics").text


def test_metrics_names_and_counts(start_server):
    server = start_server()
    prompts = [[5, 6, 7], [9] * 20]
    for p in prompts:
        assert _post(server, "/v1/completions", json=GOOD | {"prompt": p, "ignore_eos": True}).status_code == 200
    text = httpx.get(server.base_url + "/metrics").text
    for name in ["vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
                 "vllm:time_to_first_token_seconds_bucket", "vllm:inter_token_latency_seconds_bucket",
                 "vllm:e2e_request_latency_seconds_bucket", "vllm:request_queue_time_seconds_bucket",
                 "vllm:request_prompt_tokens_bucket", "vllm:request_generation_tokens_bucket",
                 "infinite_llm:rblocks_lent", "infinite_llm:rblocks_borrowed", "infinite_llm:gmanager_rounds_total"]:
        assert f'{name}{{' in text, name
    lines = dict(line.rsplit(" ", 1) for line in text.splitlines() if line and not line.startswith("#"))
    assert float(lines['vllm:prompt_tokens_total{model_name="tiny"}']) == sum(map(len, prompts))
    assert float(lines['vllm:generation_tokens_total{model_name="tiny"}']) == 3 * len(prompts)
    assert float(lines['vllm:request_success_total{finished_reason="length",model_name="tiny"}']) == 2
    assert float(lines['vllm:e2e_request_latency_seconds_count{model_name="tiny"}']) == 2
    assert float(lines['vllm:inter_token_latency_seconds_count{model_name="tiny"}']) == 2 * len(prompts)
    assert float(lines['vllm:num_requests_running{model_name="tiny"}']) == 0
    assert float(lines['infinite_llm:remote_attention_bytes_total{model_name="tiny"}']) == 0  # nothing borrowed
    assert_nothing_held(wait_idle(server))


def test_engine_failures_do_not_stop_the_server(start_server):
    server = start_server()
    loop = server.server.loop

    def break_once(driver, name):
        real = getattr(driver, name)

        def broken(*args):
            setattr(driver, name, real)
            raise RuntimeError(f"injected failure of {name}")
        setattr(driver, name, broken)

    loop.call(lambda d: break_once(d, "gauges")).result(10)  # an iteration fails: logged, the thread goes on
    assert _post(server, "/v1/completions", json=GOOD).status_code == 200
    loop.call(lambda d: break_once(d, "step")).result(10)  # a step fails: its request gets a 500, a fresh engine
    failed = _post(server, "/v1/completions", json=GOOD)
    assert failed.status_code == 500 and failed.json()["error"]["code"] == 500
    assert _post(server, "/v1/completions", json=GOOD).status_code == 200
    assert httpx.get(server.base_url + "/health").status_code == 200
    assert_nothing_held(wait_idle(server))
