"""The official `openai` client against a real uvicorn server on 127.0.0.1: completions, streaming, chat; greedy
tokens are those of the engine's generate() on the same folder."""
import httpx
import pytest

from reference_impl.backends.local import generate
from reference_impl.control.engine import EngineConfig
from server_helpers import assert_nothing_held, wait_idle

openai = pytest.importorskip("openai")
PROMPT = "tell me about the cache of every instance"


def _client(server):
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key="none", max_retries=0)


def _expected(model, prompt_ids, n, ignore_eos=False):
    return generate(model, [prompt_ids], n, EngineConfig(block_size=16), ignore_eos=ignore_eos).token_ids[0]


def test_completion_stream_and_chat(shared_server, tiny_model, tiny_tokenizer):
    client = _client(shared_server)
    assert [m.id for m in client.models.list().data] == ["tiny"]
    ids = tiny_tokenizer.encode(PROMPT)
    r = client.completions.create(model="tiny", prompt=PROMPT, max_tokens=12, temperature=0, extra_body={
        "return_token_ids": True, "ignore_eos": True})
    choice = r.choices[0]
    assert choice.prompt_token_ids == ids
    assert choice.token_ids == _expected(tiny_model, ids, 12, ignore_eos=True)
    assert choice.finish_reason == "length" and r.usage.completion_tokens == 12 and r.usage.prompt_tokens == len(ids)
    assert choice.text == tiny_tokenizer.decode(choice.token_ids)

    # the same request streamed: the pieces add up to the same text and tokens, usage last
    chunks = list(client.completions.create(model="tiny", prompt=ids, max_tokens=12, temperature=0, stream=True,
                                            stream_options={"include_usage": True},
                                            extra_body={"return_token_ids": True, "ignore_eos": True}))
    with_choices = [c for c in chunks if c.choices]
    assert len(with_choices) == 12  # one chunk per token: they stream as they are made
    assert "".join(c.choices[0].text for c in with_choices) == choice.text
    assert [t for c in with_choices for t in c.choices[0].token_ids] == choice.token_ids
    assert with_choices[-1].choices[0].finish_reason == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 12

    # chat: the prompt is the tokenizer's chat template, encoded without a second BOS
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "what is an rBlock?"}]
    chat = client.chat.completions.create(model="tiny", messages=messages, max_tokens=8, temperature=0,
                                          extra_body={"return_token_ids": True})
    chat_ids = tiny_tokenizer.encode(tiny_tokenizer.apply_chat_template(messages), add_special_tokens=False)
    assert chat.model_extra["prompt_token_ids"] == chat_ids and chat_ids.count(0) == 1
    assert chat.choices[0].token_ids == _expected(tiny_model, chat_ids, 8)
    assert chat.choices[0].message.role == "assistant" and chat.usage.prompt_tokens == len(chat_ids)
    streamed = list(client.chat.completions.create(model="tiny", messages=messages, max_tokens=8, temperature=0,
                                                   stream=True))
    assert streamed[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in streamed) == chat.choices[0].message.content
    assert_nothing_held(wait_idle(shared_server))


def test_sse_wire_format_stop_and_seed(shared_server, tiny_tokenizer):
    body = {"model": "tiny", "prompt": PROMPT, "max_tokens": 6, "temperature": 0, "stream": True, "ignore_eos": True,
            "stream_options": {"include_usage": True}}
    with httpx.stream("POST", shared_server.base_url + "/v1/completions", json=body) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        raw = r.read().decode()
    events = raw.split("\n\n")
    assert events[-2:] == ["data: [DONE]", ""] and all(e.startswith("data: ") for e in events[:-1])

    # a stop string: the text ends before it and the request ends there ("stop")
    client = _client(shared_server)
    full = client.completions.create(model="tiny", prompt=PROMPT, max_tokens=40, temperature=0,
                                     extra_body={"ignore_eos": True}).choices[0].text
    visible = full.replace("\ufffd", "")
    stop = next((visible[i:i + 2] for i in range(2, len(visible) - 2) if visible[i:i + 2].strip()), None)
    if stop is not None:
        cut = client.completions.create(model="tiny", prompt=PROMPT, max_tokens=40, temperature=0, stop=[stop],
                                        extra_body={"ignore_eos": True}).choices[0]
        assert cut.finish_reason == "stop" and cut.text == full[:full.find(stop)]

    # sampling: a seed gives the same tokens again; temperature 1 draws differ from greedy somewhere
    def draw(seed):
        return client.completions.create(model="tiny", prompt=PROMPT, max_tokens=16, temperature=1.0, seed=seed,
                                         extra_body={"return_token_ids": True, "ignore_eos": True}).choices[0].token_ids
    assert draw(7) == draw(7) and draw(7) != draw(8)

    tok = httpx.post(shared_server.base_url + "/tokenize", json={"model": "tiny", "prompt": PROMPT}).json()
    assert tok["tokens"] == tiny_tokenizer.encode(PROMPT) and tok["count"] == len(tok["tokens"])
    back = httpx.post(shared_server.base_url + "/detokenize", json={"tokens": tok["tokens"]}).json()
    assert back["prompt"] == PROMPT
    assert httpx.get(shared_server.base_url + "/health").status_code == 200


def test_chunked_prefill_server_gives_the_whole_prompt_tokens(start_server, tiny_model, tiny_tokenizer):
    server = start_server(chunked_prefill_tokens=16)
    assert server.app.state.server.config.engine_config().chunked_prefill_tokens == 16
    ids = tiny_tokenizer.encode(" ".join([PROMPT] * 4))
    assert len(ids) > 2 * 16  # several chunks
    r = _client(server).completions.create(model="tiny", prompt=ids, max_tokens=8, temperature=0, extra_body={
        "return_token_ids": True, "ignore_eos": True})
    assert r.choices[0].token_ids == _expected(tiny_model, ids, 8, ignore_eos=True)
