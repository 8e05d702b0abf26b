"""Our LlamaModel written as a Hugging Face LLaMA folder (config.json + model.safetensors) that vLLM loads."""
import json
from dataclasses import replace
from pathlib import Path

import torch

from reference_impl.model.llama import TINY, LlamaModel, random_model, weight_shapes
from reference_impl.model.resolve import resolve_model

# vLLM 0.32's CPU attention takes head sizes 32, 64, 80, ... only (CPUAttentionBackend.get_supported_head_sizes)
# and the `tiny` preset has head_dim 16, so real-vLLM runs of 'tiny' use it with 4 query / 2 KV heads: head_dim 32.
TINY_VLLM = replace(TINY, num_heads=4, num_kv_heads=2)
TORCH_DTYPES = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}


def hf_config(model: LlamaModel, max_position_embeddings: int) -> dict:
    c = model.config
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": c.vocab_size,
        "hidden_size": c.hidden_size, "intermediate_size": c.intermediate_size, "num_hidden_layers": c.num_layers,
        "num_attention_heads": c.num_heads, "num_key_value_heads": c.num_kv_heads, "head_dim": c.head_dim,
        "hidden_act": "silu", "rms_norm_eps": c.rms_norm_eps, "rope_theta": c.rope_theta, "rope_scaling": None,
        "max_position_embeddings": max_position_embeddings, "tie_word_embeddings": c.tie_word_embeddings,
        "attention_bias": False, "mlp_bias": False, "bos_token_id": None, "eos_token_id": c.eos_token_id,
        "pad_token_id": None, "torch_dtype": TORCH_DTYPES.get(model.dtype, "float32"),
    }


def save_hf_folder(model: LlamaModel, folder: str | Path, max_position_embeddings: int = 4096) -> Path:
    """Write `model` to `folder`; reference_impl.model.llama.load_model reads it back bit for bit."""
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tensors = {name: model.w[name].contiguous() for name in weight_shapes(model.config)}
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps(hf_config(model, max_position_embeddings), indent=2) + "\n")
    return folder


def model_folder(spec: str, model: LlamaModel, scratch: str | Path, max_position_embeddings: int = 4096) -> Path:
    """The Hugging Face folder vLLM should load for --model `spec`: the folder itself, or `tiny` saved in scratch."""
    if spec != "tiny":
        return Path(spec)
    return save_hf_folder(model, Path(scratch) / "tiny-hf", max_position_embeddings)


def resolve_for_vllm(spec: str, seed: int = 0, dtype=torch.float32) -> LlamaModel:
    """Like reference_impl.model.resolve.resolve_model, but 'tiny' is TINY_VLLM (a head size vLLM's CPU kernels take)."""
    if spec == "tiny":
        return random_model(TINY_VLLM, seed, dtype)
    return resolve_model(spec, dtype, seed)
