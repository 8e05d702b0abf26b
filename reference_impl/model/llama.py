"""LLaMA-family decoder (RMSNorm, RoPE, SwiGLU; MHA, GQA, MQA) whose attention is a call into the KV layer.

Tokens of a step are flattened: `forward(input_ids [T], positions [T], attend)` where
`attend(layer, q [T, Hq, D], k [T, Hkv, D], v [T, Hkv, D]) -> [T, Hq, D]` stores K/V in rBlocks and computes
attention wherever they live. Loads a Hugging Face LLaMA folder (config.json + *.safetensors) or builds the
`tiny` preset from a seed.
"""
import copy
import json
import math
from dataclasses import asdict
from pathlib import Path

import torch
import torch.nn.functional as F

from reference_impl.errors import InputError
from reference_impl.kernels import silu_mul
from reference_impl.model.config import TINY, ModelConfig, config_from_hf  # noqa: F401 (the model's public names)


def rms_norm(x, weight, eps):
    """Hugging Face LLaMA's RMSNorm (normalised in fp32, cast back, then scaled): torch's fused `rms_norm`."""
    return F.rms_norm(x.float(), (x.shape[-1],), eps=eps).to(x.dtype) * weight


def apply_rope(x, cos, sin):
    """x [T, H, D]; cos, sin [T, D] (the rotate-half layout of Hugging Face LLaMA)."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return (x * cos[:, None, :] + rotated * sin[:, None, :]).to(x.dtype)


class LlamaModel:
    """The decoder over `weights` (Hugging Face names). Each layer's Q/K/V and gate/up projections are fused into
    one matrix at construction, and the separate names become views of it (no second copy). `silu_mul_backend`:
    the kernels' backend of the MLP's SiLU-mul ("auto": the fused Triton kernel on CUDA, torch's two pointwise
    ops elsewhere)."""

    def __init__(self, config: ModelConfig, weights: dict[str, torch.Tensor], silu_mul_backend: str = "auto"):
        self.config = config
        self.silu_mul_backend = silu_mul_backend
        self.w = dict(weights)
        self.fused = [self._fuse(i) for i in range(config.num_layers)]
        d = config.head_dim
        self.inv_freq = 1.0 / (config.rope_theta ** (torch.arange(0, d, 2, dtype=torch.float32) / d))

    def _fuse(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        p, w = f"model.layers.{layer}.", self.w
        names = ([p + f"self_attn.{x}_proj.weight" for x in "qkv"], [p + f"mlp.{x}_proj.weight" for x in ("gate", "up")])
        fused = []
        for group in names:
            whole = torch.cat([w.pop(n) for n in group])
            start = 0
            for n, rows in zip(group, self._rows(group)):
                w[n] = whole[start:start + rows]
                start += rows
            fused.append(whole)
        return fused[0], fused[1]

    def _rows(self, group):
        c = self.config
        kv = c.num_kv_heads * c.head_dim
        return (c.hidden_size, kv, kv) if len(group) == 3 else (c.intermediate_size, c.intermediate_size)

    def with_silu_mul(self, backend: str) -> "LlamaModel":
        """The same model (its weights shared, not copied) with the MLP's SiLU-mul on `backend`."""
        model = copy.copy(self)
        model.silu_mul_backend = backend
        return model

    @property
    def dtype(self):
        return self.w["model.embed_tokens.weight"].dtype

    def to(self, device) -> "LlamaModel":
        """The same model with its weights on `device`."""
        return LlamaModel(self.config, {k: w.to(device) for k, w in self.w.items()}, self.silu_mul_backend)

    def rope(self, positions):
        freqs = positions.float()[:, None] * self.inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(self.dtype), emb.sin().to(self.dtype)

    @torch.inference_mode()
    def forward(self, input_ids, positions, attend):
        """input_ids, positions [T] -> hidden states [T, hidden] after the final norm."""
        c, w = self.config, self.w
        x = w["model.embed_tokens.weight"][input_ids]
        cos, sin = self.rope(positions)
        num_tokens = input_ids.shape[0]
        hq, hqk = c.num_heads, c.num_heads + c.num_kv_heads
        for i, (qkv_w, gate_up_w) in enumerate(self.fused):
            p = f"model.layers.{i}."
            h = rms_norm(x, w[p + "input_layernorm.weight"], c.rms_norm_eps)
            qkv = (h @ qkv_w.T).view(num_tokens, hqk + c.num_kv_heads, c.head_dim)
            qk = apply_rope(qkv[:, :hqk], cos, sin)  # Q and K rotated in one pass (views of one tensor after)
            attn = attend(i, qk[:, :hq], qk[:, hq:], qkv[:, hqk:])
            x = x + attn.reshape(num_tokens, -1) @ w[p + "self_attn.o_proj.weight"].T
            h = rms_norm(x, w[p + "post_attention_layernorm.weight"], c.rms_norm_eps)
            x = x + silu_mul(h @ gate_up_w.T, backend=self.silu_mul_backend) @ w[p + "mlp.down_proj.weight"].T
        return rms_norm(x, w["model.norm.weight"], c.rms_norm_eps)

    def logits(self, hidden):
        head = self.w.get("lm_head.weight", self.w["model.embed_tokens.weight"])
        return (hidden @ head.T).float()


def weight_shapes(c: ModelConfig) -> dict[str, tuple[int, ...]]:
    kv = c.num_kv_heads * c.head_dim
    shapes = {"model.embed_tokens.weight": (c.vocab_size, c.hidden_size), "model.norm.weight": (c.hidden_size,)}
    if not c.tie_word_embeddings:
        shapes["lm_head.weight"] = (c.vocab_size, c.hidden_size)
    for i in range(c.num_layers):
        p = f"model.layers.{i}."
        shapes.update({
            p + "input_layernorm.weight": (c.hidden_size,), p + "post_attention_layernorm.weight": (c.hidden_size,),
            p + "self_attn.q_proj.weight": (c.hidden_size, c.hidden_size),
            p + "self_attn.k_proj.weight": (kv, c.hidden_size), p + "self_attn.v_proj.weight": (kv, c.hidden_size),
            p + "self_attn.o_proj.weight": (c.hidden_size, c.hidden_size),
            p + "mlp.gate_proj.weight": (c.intermediate_size, c.hidden_size),
            p + "mlp.up_proj.weight": (c.intermediate_size, c.hidden_size),
            p + "mlp.down_proj.weight": (c.hidden_size, c.intermediate_size)})
    return shapes


def random_model(config: ModelConfig = TINY, seed: int = 0, dtype=torch.float32, device=None) -> LlamaModel:
    """Random weights from `seed` (norm weights near 1, matrices ~ N(0, 0.02) like HF's init). With a `device`
    they are drawn there by that device's generator (a 7B model drawn on the host takes minutes), so they differ
    from the host's draw of the same seed."""
    device = torch.device(device or "cpu")
    gen = torch.Generator(device=device).manual_seed(seed)
    weights = {}
    for name, shape in weight_shapes(config).items():
        w = torch.randn(shape, generator=gen, device=device)
        w = w.mul_(0.1).add_(1.0) if len(shape) == 1 else w.mul_(0.02)
        weights[name] = w.to(dtype)
    model = LlamaModel(config, weights)
    model.inv_freq = model.inv_freq.to(device)
    return model


def load_model(path: str | Path, dtype=torch.float32) -> LlamaModel:
    """A Hugging Face LLaMA checkpoint from a local folder (config.json and *.safetensors)."""
    folder = Path(path)
    if not (folder / "config.json").is_file():
        raise InputError(f"model folder {str(folder)!r} has no config.json; pass a Hugging Face LLaMA folder or 'tiny'")
    try:
        raw = json.loads((folder / "config.json").read_text())
    except json.JSONDecodeError as exc:
        raise InputError(f"{folder / 'config.json'} is not valid JSON ({exc.msg})") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read {folder / 'config.json'} ({exc.__class__.__name__})") from None
    try:
        config = config_from_hf(raw, name=folder.name)
    except InputError as exc:
        raise InputError(f"{folder}: {exc}") from None
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise InputError(f"model folder {str(folder)!r} has no *.safetensors weights")
    from safetensors.torch import load_file

    weights = {}
    for f in files:
        try:
            weights.update(load_file(str(f)))
        except Exception as exc:  # safetensors raises its own error types for truncated or foreign files
            raise InputError(f"cannot read {f}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
    weights = {k: v for k, v in weights.items() if not k.endswith("rotary_emb.inv_freq")}
    expected = weight_shapes(config)
    missing = sorted(set(expected) - set(weights))
    if missing:
        raise InputError(f"checkpoint in {str(folder)!r} lacks {len(missing)} tensors, e.g. {missing[0]}")
    for name, shape in expected.items():
        if tuple(weights[name].shape) != shape:
            raise InputError(f"tensor {name} has shape {tuple(weights[name].shape)}, config implies {shape}")
    return LlamaModel(config, {k: weights[k].to(dtype) for k in expected})


def describe(config: ModelConfig) -> dict:
    return {**asdict(config), "head_dim": config.head_dim}


def contiguous_attention(q, k, v, positions_q, positions_k):
    """Reference causal attention for one sequence: q [Tq, Hq, D], k/v [Tk, Hkv, D] -> [Tq, Hq, D]."""
    group = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(group, dim=1)
    v = v.repeat_interleave(group, dim=1)
    scores = torch.einsum("qhd,khd->hqk", q.float(), k.float()) / math.sqrt(q.shape[-1])
    mask = positions_k[None, :] > positions_q[:, None]
    scores = scores.masked_fill(mask[None], float("-inf"))
    return torch.einsum("hqk,khd->qhd", torch.softmax(scores, dim=-1), v.float()).to(q.dtype)
