"""The text tokenizer against transformers' own (an independent reading of the same folder)."""
import json

import pytest

from reference_impl.errors import InputError
from reference_impl.model.tokenizer import NoChatTemplate, load_tokenizer

TEMPLATE = ("{{ bos_token }}{% for m in messages %}{% if m['role'] not in ['system', 'user', 'assistant'] %}"
            "{{ raise_exception('unknown role ' + m['role']) }}{% endif %}"
            "<|{{ m['role'] }}|>\n{{ m['content'] }}{{ eos_token }}\n{% endfor %}"
            "{% if add_generation_prompt %}<|assistant|>\n{% endif %}")
TEXT = ["the quick brown fox jumps over the lazy dog", "a cache of keys and values, block by block",
        "attention spread over many instances", "naïve café: ünïcödé text ✓"] * 20


def _folder(tmp_path, template=TEMPLATE):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(TEXT, trainers.BpeTrainer(vocab_size=300, special_tokens=["<s>", "</s>"],
                                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 0)])
    tok.save(str(tmp_path / "tokenizer.json"))
    config = {"bos_token": "<s>", "eos_token": "</s>", "tokenizer_class": "PreTrainedTokenizerFast"}
    if template is not None:
        config["chat_template"] = template
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    return tmp_path


def test_encode_decode_and_chat_match_transformers(tmp_path):
    transformers = pytest.importorskip("transformers")
    folder = _folder(tmp_path)
    ours = load_tokenizer(folder)
    theirs = transformers.PreTrainedTokenizerFast.from_pretrained(str(folder))
    for text in ["the lazy fox", "café ✓ unseen wörds", ""]:
        assert ours.encode(text) == theirs(text)["input_ids"]
        assert ours.encode(text)[:1] == [0]  # BOS by the post-processor
        assert ours.decode(ours.encode(text)) == text
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi there"}]
    for gen in (True, False):
        assert ours.apply_chat_template(messages, gen) == theirs.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=gen)
    assert ours.eos_token_id == theirs.eos_token_id == 1
    with pytest.raises(InputError, match="unknown role"):
        ours.apply_chat_template([{"role": "robot", "content": "x"}])


def test_no_template_no_tokenizer(tmp_path):
    assert load_tokenizer(tmp_path) is None
    ours = load_tokenizer(_folder(tmp_path, template=None))
    with pytest.raises(NoChatTemplate, match="no chat template"):
        ours.apply_chat_template([{"role": "user", "content": "hi"}])
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    config["eos_token"] = {"content": "</s>", "__type": "AddedToken"}  # the older files' form
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    assert load_tokenizer(tmp_path).eos_token_id == 1
    (tmp_path / "tokenizer.json").write_text("{not json")
    with pytest.raises(InputError, match="cannot read"):
        load_tokenizer(tmp_path)
