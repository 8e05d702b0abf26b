"""A request's generated text as its tokens come: decoded whole each time (so multi-byte characters split across
tokens come out whole), held back while it may end in a partial character or in the start of a stop string, and
cut before the first stop string (which is not returned, as in the OpenAI API)."""


class TextStream:
    def __init__(self, tokenizer, stops: list[str]):
        self.tokenizer = tokenizer
        self.stops = stops
        self.hold = max((len(s) for s in stops), default=1) - 1
        self.ids: list[int] = []
        self.sent = ""
        self.stopped = False

    def push(self, token_ids: list[int], final: bool = False) -> str:
        """The new text after `token_ids` (all of it when `final`); sets `stopped` when a stop string appeared."""
        self.ids += token_ids
        if self.tokenizer is None:
            return ""
        text = self.tokenizer.decode(self.ids)
        cut = min((i for i in (text.find(s) for s in self.stops) if i >= 0), default=-1)
        if cut >= 0:
            text, final, self.stopped = text[:cut], True, True
        if not final:
            text = text.rstrip("\ufffd")  # a character whose bytes are not all here yet
            text = text[:len(text) - self.hold] if self.hold else text
        if not text.startswith(self.sent) or len(text) <= len(self.sent):
            return ""
        delta, self.sent = text[len(self.sent):], text
        return delta
