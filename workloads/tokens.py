"""Token counts: a real tokenizer when the user names a local tokenizer.json, else a chars/token estimate."""
import math
import os
from collections.abc import Callable

from reference_impl.errors import InputError

# About 4 characters per token for English text under BPE tokenizers (GPT-2/LLaMA-style); code,
# CJK text and numbers tokenize denser, so real counts for ShareGPT can differ by tens of percent.
CHARS_PER_TOKEN = 4.0

TokenCounter = Callable[[str], int]


def estimate_tokens(text: str) -> int:
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def make_token_counter(tokenizer_path: str | os.PathLike | None = None) -> tuple[TokenCounter, str]:
    """(counter, description): counts tokens of a text with the tokenizer.json at `tokenizer_path`."""
    if tokenizer_path is None:
        return estimate_tokens, f"estimate {CHARS_PER_TOKEN:g} chars/token"
    if not os.path.isfile(tokenizer_path):
        raise InputError(f"{tokenizer_path}: no such tokenizer file (expected a local tokenizer.json)")
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise InputError("--tokenizer needs the `tokenizers` package: pip install tokenizers") from None
    try:
        tokenizer = Tokenizer.from_file(str(tokenizer_path))
    except Exception as exc:  # the Rust side raises plain Exception subclasses
        raise InputError(f"{tokenizer_path}: not a tokenizer.json the `tokenizers` library can read ({exc})") from None

    def count(text: str) -> int:
        return len(tokenizer.encode(text, add_special_tokens=False).ids)

    return count, f"tokenizer {os.path.basename(tokenizer_path)}"
