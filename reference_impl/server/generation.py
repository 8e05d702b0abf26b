"""One request's life on the server's side: checked and turned into a Sequence, submitted to the engine loop, its
Events read as (text, token ids, finish reason) pieces, and aborted when the client goes or a stop string appears."""
import asyncio
import itertools
import time
from dataclasses import dataclass

from reference_impl.control.sampling import SamplingParams
from reference_impl.control.sequence import Sequence
from reference_impl.errors import InputError
from reference_impl.server.protocol import ServerError
from reference_impl.server.text import TextStream

DISCONNECT_POLL_S = 0.2  # how often a non-streaming request checks that its client is still there


class Disconnected(Exception):
    pass


@dataclass(frozen=True, slots=True)
class Piece:
    text: str
    token_ids: list[int]
    finish_reason: str | None


class Generation:
    _ids = itertools.count()

    def __init__(self, server, prompt_ids: list[int], max_tokens: int | None, sampling: SamplingParams,
                 stops: list[str], ignore_eos: bool):
        served, loop = server.served, server.loop
        self.server = server
        self.prompt_ids = prompt_ids
        if stops and served.tokenizer is None:
            raise ServerError(400, "stop strings need a tokenizer; this model has none", "stop")
        room = served.max_model_len - len(prompt_ids)
        if max_tokens is None:
            max_tokens = min(server.config.default_max_tokens, room)
        if max_tokens < 1:
            raise ServerError(400, f"max_tokens must be at least 1, got {max_tokens}", "max_tokens")
        if max_tokens > room:
            raise ServerError(400, f"This model's maximum context length is {served.max_model_len} tokens (what "
                                   f"the cluster's rBlocks hold for one request). However, you requested "
                                   f"{len(prompt_ids) + max_tokens} tokens ({len(prompt_ids)} in the prompt, "
                                   f"{max_tokens} for the completion).", "max_tokens")
        if loop.num_queued >= server.config.max_queue:
            server.metrics.rejected.inc()
            raise ServerError(503, f"the server has {loop.num_queued} requests waiting (--max-queue "
                                   f"{server.config.max_queue}); retry later")
        eos = None if ignore_eos else served.model.config.eos_token_id
        self.req_id = next(self._ids)
        self.seq = Sequence(self.req_id, list(prompt_ids), max_tokens, eos, sampling=sampling)
        self.text = TextStream(served.tokenizer, stops)
        self.arrival_s = time.monotonic()
        self.events = loop.submit(self.seq, self.arrival_s)
        self.done = False

    @property
    def num_generated(self) -> int:
        return len(self.text.ids)

    def close(self, finished_reason: str | None = None) -> None:
        """Abort the request in the engine unless it ended (idempotent)."""
        if not self.done:
            self.done = True
            self.server.loop.abort(self.req_id, finished_reason)

    async def pieces(self, request=None):
        """The request's pieces as they come; with `request`, Disconnected when its client goes."""
        checked_s = time.monotonic()
        while not self.done:
            if request is None:
                event = await self.events.get()
            else:
                try:
                    event = await asyncio.wait_for(self.events.get(), DISCONNECT_POLL_S)
                except asyncio.TimeoutError:
                    event = None
                if time.monotonic() - checked_s >= DISCONNECT_POLL_S:  # (tokens may come faster than the poll)
                    checked_s = time.monotonic()
                    if await request.is_disconnected():
                        self.close()
                        raise Disconnected
                if event is None:
                    continue
            if event.finish_reason == "error":
                self.done = True
                raise ServerError(500 if "engine failed" in (event.error or "") else 400, event.error)
            if event.finish_reason == "abort":
                self.done = True
                return
            text = self.text.push(event.token_ids, final=event.finish_reason is not None)
            finish = event.finish_reason
            if self.text.stopped:
                finish = "stop"
                self.close(finish)
            self.done = self.done or finish is not None
            yield Piece(text, event.token_ids, finish)

    def usage(self) -> dict:
        p, c = len(self.prompt_ids), self.num_generated
        return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}


def sampling_params(body) -> SamplingParams:
    """The request's sampling (the API's defaults: temperature 1, top_p 1); 400 on values out of range."""
    try:
        return SamplingParams(temperature=1.0 if body.temperature is None else body.temperature,
                              top_p=1.0 if body.top_p is None else body.top_p, seed=body.seed)
    except InputError as exc:
        raise ServerError(400, str(exc)) from None
