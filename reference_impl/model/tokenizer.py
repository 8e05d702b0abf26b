"""Text <-> token ids for a model folder: its tokenizer.json (the `tokenizers` library) and the chat template of its
tokenizer_config.json (or chat_template.jinja), rendered with jinja2 the way Hugging Face renders it."""
import json
from dataclasses import dataclass
from pathlib import Path

from reference_impl.errors import InputError


class NoChatTemplate(InputError):
    """The model's tokenizer has no chat template, so chat messages cannot be turned into a prompt."""


def _token_text(value) -> str | None:
    """tokenizer_config.json writes special tokens as a string or as {"content": ...}."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def _pick_template(value) -> str | None:
    """`chat_template` is a string, or a list of {"name", "template"} (the one named "default" is the chat one)."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        named = {t.get("name"): t.get("template") for t in value if isinstance(t, dict)}
        return named.get("default")
    return None


@dataclass(frozen=True)
class TextTokenizer:
    """A model's tokenizer: `encode`, `decode`, `apply_chat_template` (NoChatTemplate where the folder has none)."""
    tokenizer: object  # tokenizers.Tokenizer
    chat_template: str | None = None
    bos_token: str | None = None
    eos_token: str | None = None

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size(with_added_tokens=True)

    @property
    def eos_token_id(self) -> int | None:
        return None if self.eos_token is None else self.tokenizer.token_to_id(self.eos_token)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """Token ids of `text` (with the post-processor's special tokens, e.g. BOS, unless told not to)."""
        return self.tokenizer.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def apply_chat_template(self, messages: list[dict], add_generation_prompt: bool = True) -> str:
        """The prompt text of chat `messages` ([{"role", "content"}, ...]) by the model's chat template (encode it
        with add_special_tokens=False: the template writes BOS itself)."""
        if self.chat_template is None:
            raise NoChatTemplate("this model's tokenizer has no chat template; use /v1/completions with a prompt")
        from jinja2 import TemplateError
        try:
            return _compile(self.chat_template).render(
                messages=messages, add_generation_prompt=add_generation_prompt,
                bos_token=self.bos_token or "", eos_token=self.eos_token or "")
        except TemplateError as exc:
            raise InputError(f"the chat template refused these messages: {exc}") from None


def _raise(message):
    from jinja2 import TemplateError
    raise TemplateError(message)


_compiled: dict[str, object] = {}


def _compile(source: str):
    """The template compiled once, in a sandbox with Hugging Face's settings (trim_blocks, lstrip_blocks,
    raise_exception)."""
    if source not in _compiled:
        from jinja2.sandbox import ImmutableSandboxedEnvironment
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        env.globals["raise_exception"] = _raise
        _compiled[source] = env.from_string(source)
    return _compiled[source]


def load_tokenizer(folder: str | Path) -> TextTokenizer | None:
    """The tokenizer of a model folder, or None when it has no tokenizer.json."""
    folder = Path(folder)
    path = folder / "tokenizer.json"
    if not path.is_file():
        return None
    from tokenizers import Tokenizer
    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as exc:  # the library raises its own exception type for a malformed file
        why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise InputError(f"cannot read {path}: {why}") from None
    config = {}
    config_path = folder / "tokenizer_config.json"
    if config_path.is_file():
        try:
            config = json.loads(config_path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise InputError(f"{config_path} is not valid JSON ({exc})") from None
    template = _pick_template(config.get("chat_template"))
    jinja_path = folder / "chat_template.jinja"
    if template is None and jinja_path.is_file():
        template = jinja_path.read_text()
    return TextTokenizer(tokenizer, template, _token_text(config.get("bos_token")),
                         _token_text(config.get("eos_token")))
