"""The OpenAI API's request bodies as the server reads them, and its error shape. Fields a client may send that
change nothing here (user, repetition_penalty 1, ...) are accepted; those that would change the answer and are
not implemented are refused with a clear message (ServerError, 400)."""
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt


class ServerError(Exception):
    """An answer other than 200: the status, and the message in the OpenAI error shape."""

    def __init__(self, status: int, message: str, param: str | None = None):
        super().__init__(message)
        self.status, self.message, self.param = status, message, param


ERROR_TYPES = {400: "BadRequestError", 404: "NotFoundError", 500: "InternalServerError",
               503: "ServiceUnavailableError"}


def error_body(status: int, message: str, param: str | None = None) -> dict:
    return {"error": {"message": message, "type": ERROR_TYPES.get(status, "Error"), "param": param, "code": status}}


class StreamOptions(BaseModel):
    include_usage: StrictBool = False
    continuous_usage_stats: StrictBool = False


class _Sampling(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str | None = None
    max_tokens: StrictInt | None = None
    temperature: float | None = None
    top_p: float | None = None
    seed: StrictInt | None = None
    stop: str | list[str] | None = None
    ignore_eos: StrictBool = False
    stream: StrictBool = False
    stream_options: StreamOptions | None = None
    n: StrictInt = 1
    repetition_penalty: float = 1.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    return_token_ids: StrictBool = False

    def refuse_unsupported(self) -> None:
        """400 for what the engine does not do (rather than quietly answering something else)."""
        if self.n != 1:
            raise ServerError(400, "n must be 1: this server returns one choice per request", "n")
        for name in ("repetition_penalty",):
            if getattr(self, name) != 1.0:
                raise ServerError(400, f"{name} is not supported (only 1.0)", name)
        for name in ("frequency_penalty", "presence_penalty"):
            if getattr(self, name) != 0.0:
                raise ServerError(400, f"{name} is not supported (only 0)", name)
        if getattr(self, "best_of", None) not in (None, 1):
            raise ServerError(400, "best_of is not supported (only 1)", "best_of")

    @property
    def stops(self) -> list[str]:
        stops = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        return [s for s in stops if s]


class CompletionRequest(_Sampling):
    prompt: str | list[StrictInt] | list[str] | list[list[StrictInt]]
    logprobs: StrictInt | None = None
    echo: StrictBool = False
    suffix: str | None = None


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: str
    content: str | list[dict] | None = None

    def text(self) -> str:
        if self.content is None or isinstance(self.content, str):
            return self.content or ""
        parts = []
        for part in self.content:
            if part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise ServerError(400, "only text content parts are supported", "messages")
            parts.append(part["text"])
        return "".join(parts)


class ChatCompletionRequest(_Sampling):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: StrictInt | None = None
    logprobs: StrictBool = False
    top_logprobs: StrictInt | None = None
    add_generation_prompt: StrictBool = True


class TokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str | None = None
    prompt: str | None = None
    messages: list[ChatMessage] | None = None
    add_special_tokens: StrictBool = True


class DetokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str | None = None
    tokens: list[StrictInt]


FinishReason = Literal["stop", "length", "abort"]
