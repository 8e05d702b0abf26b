import os

import pytest
import torch

# The Triton interpreter flag is read when kernels are decorated, so it must be set before any import.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

# Every case simulates its points afresh; the store of finished points (repro/serving/store.py) is tested where a
# case names one (--param store=...)
os.environ["REPRO_POINT_STORE"] = "off"


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)


def pytest_addoption(parser):
    parser.addoption("--bench-size", choices=("ci", "large"), default="ci",
                     help="sizes of the speed guard (tests/speed): ci for `make test`, large for `make bench`")


@pytest.fixture
def repro_cli(capsys):
    """`repro ARGV` through its console entry point: (exit status, stdout, stderr)."""
    from repro.cli import main

    def run(argv) -> tuple[int, str, str]:
        try:
            main(argv)
            code = 0
        except SystemExit as exc:
            code = exc.code
        out, err = capsys.readouterr()
        return code, out, err
    return run


@pytest.fixture(scope="session")
def save_hf_llama(tmp_path_factory):
    """Builds a small random transformers LlamaForCausalLM (the reference the engine is checked against), saves it as
    a Hugging Face folder (fp32 safetensors) and returns the folder: `save_hf_llama(name, seed, **dims)`."""
    import transformers

    def save(name: str, seed: int, *, vocab_size=256, hidden_size=64, intermediate_size=160, num_kv_heads=2):
        config = transformers.LlamaConfig(
            vocab_size=vocab_size, hidden_size=hidden_size, intermediate_size=intermediate_size, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=num_kv_heads, max_position_embeddings=vocab_size,
            rms_norm_eps=1e-5, rope_theta=10000.0, initializer_range=0.1, tie_word_embeddings=False,
            bos_token_id=None, eos_token_id=None, pad_token_id=None)
        torch.manual_seed(seed)
        folder = tmp_path_factory.mktemp(name)
        transformers.LlamaForCausalLM(config).eval().save_pretrained(folder, safe_serialization=True)
        return folder
    return save
