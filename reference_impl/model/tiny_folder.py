"""The `tiny` model as a Hugging Face folder, made here with no download: the tiny preset's random weights (seed 0,
the same tensors as `random_model(TINY)`) as safetensors, its config.json, and a byte-level BPE tokenizer trained
with the `tokenizers` library on text generated from a seeded word list, with a chat template. Built once into a
cache folder (REPRO_CACHE_DIR, else ~/.cache/infinite-llm-repro); the same bytes every time."""
import json
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np

from reference_impl.model.llama import TINY, ModelConfig, random_model

VERSION = "tiny-chat-v1"  # bump when anything below changes what is written
SPECIAL_TOKENS = ["<s>", "</s>"]  # ids 0 (BOS) and 1 (EOS)
CHAT_TEMPLATE = ("{{ bos_token }}{% for m in messages %}"
                 "{% if m['role'] not in ['system', 'user', 'assistant'] %}"
                 "{{ raise_exception('role must be system, user or assistant, got ' + m['role']) }}{% endif %}"
                 "<|{{ m['role'] }}|>\n{{ m['content'] }}{{ eos_token }}\n{% endfor %}"
                 "{% if add_generation_prompt %}<|assistant|>\n{% endif %}")
_WORDS = """the a of and to in is it that for on with as was at by be this from or an are not but have what
all were when we there can more one which will their if out so up about who them some time would make like into
than its only other new could these two may first then do any my now such our over most me even back after use
many how well way because good very where just those both day through long little same here should still great
cache block key value attention head layer token model serve request batch queue memory instance pool lend borrow
debt credit prompt decode prefill step engine cluster node device host kernel tensor query partial reduce merge
fast slow short large small more less every each half whole one two three four five six seven eight nine ten
hello thanks please yes no why which answer question tell explain write read show think know help user system""".split()


def tiny_cache_dir() -> Path:
    return Path(os.environ.get("REPRO_CACHE_DIR") or Path.home() / ".cache" / "infinite-llm-repro")


def training_text(num_lines: int = 3000, seed: int = 0) -> list[str]:
    """Sentences of the word list drawn from `seed`, some as chat turns (so BPE learns the template's markers)."""
    rng = np.random.default_rng(seed)
    lines = []
    for i in range(num_lines):
        words = rng.choice(_WORDS, size=int(rng.integers(4, 16)))
        sentence = " ".join(words).capitalize() + rng.choice([".", "?", "!", ","])
        if i % 4 == 0:
            sentence = f"<|{rng.choice(['system', 'user', 'assistant'])}|>\n{sentence}"
        lines.append(sentence + f" {int(rng.integers(0, 1000))}" * int(i % 7 == 0))
    return lines


def train_tokenizer(vocab_size: int):
    """A byte-level BPE of `vocab_size` tokens (<s> and </s> first; BOS added by its post-processor)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(training_text(), trainer)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                       special_tokens=[("<s>", 0)])
    return tok


def hf_config(c: ModelConfig) -> dict:
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
            "vocab_size": c.vocab_size, "hidden_size": c.hidden_size, "intermediate_size": c.intermediate_size,
            "num_hidden_layers": c.num_layers, "num_attention_heads": c.num_heads,
            "num_key_value_heads": c.num_kv_heads, "rms_norm_eps": c.rms_norm_eps, "rope_theta": c.rope_theta,
            "tie_word_embeddings": c.tie_word_embeddings, "bos_token_id": 0, "eos_token_id": 1,
            "max_position_embeddings": 4096, "torch_dtype": "float32"}


def write_tiny_folder(folder: Path, config: ModelConfig = TINY) -> None:
    """Write the tiny model folder's files into `folder` (which exists); `config` another shape of it (vLLM's CPU
    attention needs head_dim 32: baselines/real_vllm/model.py TINY_VLLM)."""
    from safetensors.torch import save_file

    model = random_model(config, seed=0)
    save_file({k: v.contiguous() for k, v in model.w.items()}, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps(hf_config(config), indent=1, sort_keys=True))
    tok = train_tokenizer(config.vocab_size)
    if tok.get_vocab_size() != config.vocab_size:
        raise RuntimeError(f"the tiny tokenizer has {tok.get_vocab_size()} tokens, the model {config.vocab_size}")
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "bos_token": "<s>", "eos_token": "</s>", "chat_template": CHAT_TEMPLATE,
        "tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 4096}, indent=1, sort_keys=True))


def tiny_folder(cache_dir: Path | None = None) -> Path:
    """The tiny model folder, built on first use (into a temp folder renamed into place: readers never see half)."""
    root = Path(cache_dir) if cache_dir is not None else tiny_cache_dir()
    folder = root / VERSION
    if (folder / "config.json").is_file():
        return folder
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=root, prefix=f".{VERSION}."))
    try:
        write_tiny_folder(tmp)
        try:
            tmp.rename(folder)
        except OSError:  # another process built it first
            if not (folder / "config.json").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder
