"""The tiny model folder: built with no download, the same bytes each time, and a model transformers runs the same."""
import hashlib

import pytest
import torch

from reference_impl.backends.local import generate
from reference_impl.control.engine import EngineConfig
from reference_impl.model.llama import TINY, load_model, random_model
from reference_impl.model.tiny_folder import tiny_folder
from reference_impl.model.tokenizer import load_tokenizer


def _digests(folder):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def test_deterministic_and_consistent(tmp_path):
    a, b = tiny_folder(tmp_path / "a"), tiny_folder(tmp_path / "b")
    assert _digests(a) == _digests(b) and len(_digests(a)) == 4
    assert tiny_folder(tmp_path / "a") == a  # built once
    model, tok = load_model(a), load_tokenizer(a)
    assert tok.vocab_size == model.config.vocab_size == TINY.vocab_size
    assert tok.eos_token_id == model.config.eos_token_id == 1
    ref = random_model(TINY, seed=0)
    assert all(torch.equal(model.w[k], ref.w[k]) for k in ref.w)
    text = "Tell me about the cache, please!"
    assert tok.decode(tok.encode(text)) == text
    assert len(tok.encode(text)) < len(text.encode())  # BPE merged something
    chat = tok.apply_chat_template([{"role": "user", "content": "hello"}])
    assert chat.endswith("<|assistant|>\n") and chat.startswith("<s>")


def test_transformers_greedy_equals_ours(tmp_path):
    transformers = pytest.importorskip("transformers")
    folder = tiny_folder(tmp_path)
    hf = transformers.LlamaForCausalLM.from_pretrained(str(folder), attn_implementation="eager").float().eval()
    tok = load_tokenizer(folder)
    prompt = tok.encode("the quick answer to every question")
    out = []
    with torch.no_grad():
        for _ in range(8):
            out.append(int(hf(torch.tensor([prompt + out])).logits[0, -1].argmax()))
    ours = generate(load_model(folder), [prompt], 8, EngineConfig(block_size=4), ignore_eos=True).token_ids[0]
    assert ours == out
