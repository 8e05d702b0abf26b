"""The OpenAI-compatible routes over the engine loop (FastAPI): completions, chat, models, health, tokenize,
detokenize, metrics. Every refusal is the OpenAI error shape with its status; nothing a client sends stops the
server."""
import json
import logging
import time
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse

from reference_impl.errors import InputError
from reference_impl.server.config import ServedModel, ServerConfig, load_served
from reference_impl.server.engine_loop import EngineLoop
from reference_impl.server.generation import Disconnected, Generation, sampling_params
from reference_impl.server.metrics import ServerMetrics
from reference_impl.server.protocol import (ChatCompletionRequest, CompletionRequest, DetokenizeRequest,
                                            ServerError, TokenizeRequest, error_body)

log = logging.getLogger("repro.serve")
VERSION = "0.1.0"


class Server:
    """What the routes share: the config, the served model, the metrics and the engine loop."""

    def __init__(self, config: ServerConfig, served: ServedModel | None = None):
        self.config = config
        self.served = served or load_served(config)
        self.metrics = ServerMetrics(self.served.name)
        self.loop = EngineLoop(self._make_driver, self.metrics)
        self.created = int(time.time())

    def _make_driver(self):
        from reference_impl.server.drivers import LocalDriver, RayDriver

        if self.config.backend == "ray":
            return RayDriver(self.config.engine_run(), self.served.model, self.config.ray_config())
        return LocalDriver(self.config.engine_run(), self.served.model)

    def check_model(self, name: str | None) -> None:
        if name is not None and name != self.served.name:
            raise ServerError(404, f"The model `{name}` does not exist.", "model")

    def prompt_ids(self, prompt) -> list[int]:
        """Token ids of a completion prompt: text (encoded by the model's tokenizer) or token ids, one prompt."""
        if isinstance(prompt, list) and prompt and not isinstance(prompt[0], int):
            if len(prompt) != 1:
                raise ServerError(400, "batched prompts are not supported: send one prompt per request", "prompt")
            prompt = prompt[0]
        if isinstance(prompt, str):
            tokenizer = self.served.tokenizer
            if tokenizer is None:
                raise ServerError(400, "this model has no tokenizer: send the prompt as token ids", "prompt")
            ids = tokenizer.encode(prompt)
        else:
            ids = list(prompt)
        self.check_ids(ids)
        return ids

    def check_ids(self, ids: list[int], param: str = "prompt") -> None:
        vocab = self.served.model.config.vocab_size
        if not ids:
            raise ServerError(400, f"the {param} is empty", param)
        bad = next((t for t in ids if not 0 <= t < vocab), None)
        if bad is not None:
            raise ServerError(400, f"token id {bad} is outside the vocabulary [0, {vocab})", param)

    def chat_ids(self, messages, add_generation_prompt: bool = True) -> list[int]:
        tokenizer = self.served.tokenizer
        if tokenizer is None:
            raise ServerError(400, "this model has no tokenizer, so no chat template: use /v1/completions with "
                                   "token ids", "messages")
        try:
            text = tokenizer.apply_chat_template([{"role": m.role, "content": m.text()} for m in messages],
                                                 add_generation_prompt)
        except InputError as exc:
            raise ServerError(400, str(exc), "messages") from None
        ids = tokenizer.encode(text, add_special_tokens=False)
        self.check_ids(ids)
        return ids


def _sse(obj) -> str:
    return f"data: {json.dumps(obj, separators=(',', ':'))}\n\n"


async def _stream(gen: Generation, chunk, include_usage: bool, first=None):
    """SSE of a generation: `chunk(piece)` per piece, a usage chunk when asked, then [DONE]; the request is aborted
    if the client goes (the response's task is cancelled, and `finally` runs)."""
    try:
        if first is not None:
            yield _sse(first)
        try:
            async for piece in gen.pieces():
                yield _sse(chunk(piece))
        except ServerError as exc:
            yield _sse(error_body(exc.status, exc.message, exc.param))
        if include_usage:
            yield _sse(chunk(None) | {"choices": [], "usage": gen.usage()})
        yield "data: [DONE]\n\n"
    finally:
        gen.close()


async def _collect(gen: Generation, request: Request):
    text, ids, finish = [], [], None
    try:
        async for piece in gen.pieces(request):
            text.append(piece.text)
            ids += piece.token_ids
            finish = piece.finish_reason or finish
    finally:
        gen.close()
    return "".join(text), ids, finish or "abort"


def build_app(config: ServerConfig, served: ServedModel | None = None) -> FastAPI:
    """The FastAPI app of `config` (its engine loop starts and stops with the app)."""
    server = Server(config, served)

    @asynccontextmanager
    async def lifespan(_app):
        server.loop.start()
        yield
        server.loop.stop()

    app = FastAPI(title="infinite-llm-repro", version=VERSION, lifespan=lifespan)
    app.state.server = server

    @app.exception_handler(ServerError)
    async def _server_error(_request, exc: ServerError):
        headers = {"Retry-After": "1"} if exc.status == 503 else None
        return JSONResponse(error_body(exc.status, exc.message, exc.param), exc.status, headers=headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_request, exc: RequestValidationError):
        errors = exc.errors()
        first = errors[0] if errors else {}
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
        if first.get("type") == "json_invalid":
            message = f"the body is not valid JSON ({first.get('ctx', {}).get('error', 'parse error')})"
            where = ""
        else:
            message = f"{where or 'body'}: {first.get('msg', 'invalid request')}"
        return JSONResponse(error_body(400, message, where or None), 400)

    @app.exception_handler(InputError)
    async def _input_error(_request, exc: InputError):
        return JSONResponse(error_body(400, str(exc)), 400)

    @app.exception_handler(Disconnected)
    async def _gone(_request, _exc):
        return Response(status_code=499)

    @app.exception_handler(Exception)
    async def _internal(_request, exc: Exception):
        log.exception("request failed")
        return JSONResponse(error_body(500, f"internal error: {type(exc).__name__}"), 500)

    def _check_sampling(body):
        server.check_model(body.model)
        body.refuse_unsupported()
        return sampling_params(body)

    @app.post("/v1/completions")
    async def completions(body: CompletionRequest, request: Request):
        sampling = _check_sampling(body)
        if body.logprobs is not None:
            raise ServerError(400, "logprobs are not supported by this server; leave logprobs unset", "logprobs")
        if body.echo or body.suffix:
            raise ServerError(400, "echo and suffix are not supported", "echo" if body.echo else "suffix")
        prompt_ids = server.prompt_ids(body.prompt)
        gen = Generation(server, prompt_ids, body.max_tokens, sampling, body.stops, body.ignore_eos)
        rid, created, name = f"cmpl-{gen.req_id}", int(time.time()), server.served.name

        def choice(text, ids, finish, first=False):
            c = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish, "stop_reason": None}
            if body.return_token_ids:
                c["token_ids"] = ids
                if first:
                    c["prompt_token_ids"] = prompt_ids
            return c

        def chunk(piece):
            if piece is None:
                return {"id": rid, "object": "text_completion", "created": created, "model": name}
            first = not chunk.sent
            chunk.sent = True
            return chunk(None) | {"choices": [choice(piece.text, piece.token_ids, piece.finish_reason, first)]}
        chunk.sent = False

        if body.stream:
            usage = bool(body.stream_options and body.stream_options.include_usage)
            return StreamingResponse(_stream(gen, chunk, usage), media_type="text/event-stream")
        text, ids, finish = await _collect(gen, request)
        return {"id": rid, "object": "text_completion", "created": created, "model": name,
                "choices": [choice(text, ids, finish, first=True)], "usage": gen.usage()}

    @app.post("/v1/chat/completions")
    async def chat_completions(body: ChatCompletionRequest, request: Request):
        sampling = _check_sampling(body)
        if body.logprobs or body.top_logprobs:
            raise ServerError(400, "logprobs are not supported by this server; leave logprobs unset", "logprobs")
        prompt_ids = server.chat_ids(body.messages, body.add_generation_prompt)
        max_tokens = body.max_completion_tokens if body.max_completion_tokens is not None else body.max_tokens
        gen = Generation(server, prompt_ids, max_tokens, sampling, body.stops, body.ignore_eos)
        rid, created, name = f"chatcmpl-{gen.req_id}", int(time.time()), server.served.name
        head = {"id": rid, "object": "chat.completion.chunk", "created": created, "model": name}

        def chunk(piece):
            if piece is None:
                return dict(head)
            c = {"index": 0, "delta": {"content": piece.text}, "logprobs": None, "finish_reason": piece.finish_reason}
            if body.return_token_ids:
                c["token_ids"] = piece.token_ids
            return head | {"choices": [c]}

        if body.stream:
            usage = bool(body.stream_options and body.stream_options.include_usage)
            first = head | {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                         "logprobs": None, "finish_reason": None}]}
            return StreamingResponse(_stream(gen, chunk, usage, first), media_type="text/event-stream")
        text, ids, finish = await _collect(gen, request)
        c = {"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None, "finish_reason": finish}
        if body.return_token_ids:
            c["token_ids"] = ids
        return {"id": rid, "object": "chat.completion", "created": created, "model": name, "choices": [c],
                "usage": gen.usage()} | ({"prompt_token_ids": prompt_ids} if body.return_token_ids else {})

    @app.get("/v1/models")
    async def models():
        s = server.served
        return {"object": "list", "data": [{"id": s.name, "object": "model", "created": server.created,
                                            "owned_by": "infinite-llm-repro", "root": s.root,
                                            "max_model_len": s.max_model_len}]}

    @app.get("/health")
    async def health():
        return Response(status_code=200 if server.loop.is_alive else 503)

    @app.get("/version")
    async def version():
        return {"version": VERSION}

    @app.post("/tokenize")
    async def tokenize(body: TokenizeRequest):
        server.check_model(body.model)
        if (body.prompt is None) == (body.messages is None):
            raise ServerError(400, "give either prompt or messages", "prompt")
        if body.messages is not None:
            ids = server.chat_ids(body.messages)
        elif server.served.tokenizer is None:
            raise ServerError(400, "this model has no tokenizer", "prompt")
        else:
            ids = server.served.tokenizer.encode(body.prompt, add_special_tokens=body.add_special_tokens)
        return {"count": len(ids), "max_model_len": server.served.max_model_len, "tokens": ids}

    @app.post("/detokenize")
    async def detokenize(body: DetokenizeRequest):
        server.check_model(body.model)
        if server.served.tokenizer is None:
            raise ServerError(400, "this model has no tokenizer", "tokens")
        server.check_ids(body.tokens or [0], "tokens")
        return {"prompt": server.served.tokenizer.decode(body.tokens)}

    @app.get("/metrics")
    async def metrics():
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
        return Response(generate_latest(server.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    return app
