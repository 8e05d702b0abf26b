"""Part 2: the engine with its kernels in the step gives transformers' greedy tokens (one instance, and
instances whose budgets force KV onto the others)."""
import os
import tempfile
from dataclasses import asdict

import numpy as np
import torch

from reference_impl.backends.local import generate
from reference_impl.control.engine import EngineConfig
from reference_impl.control.sequence import num_blocks_for
from reference_impl.model.llama import load_model

SEED = 0


def hf_greedy(model, prompt: list[int], new_tokens: int, device) -> list[int]:
    tokens = []
    with torch.no_grad():
        out = model(torch.tensor([prompt], device=device), use_cache=True)
        for _ in range(new_tokens):
            tokens.append(int(out.logits[0, -1].argmax()))
            out = model(torch.tensor([[tokens[-1]]], device=device), past_key_values=out.past_key_values,
                        use_cache=True)
    return tokens


def remote_fraction(engine) -> float:
    """The share of the cluster's rBlocks held by an instance other than their request's home."""
    blocks = [(rm.inst_id, b.inst_id) for rm in engine.rmanagers.values() for t in rm.tables.values() for b in t]
    return sum(h != w for h, w in blocks) / len(blocks) if blocks else 0.0


def run(size, device: torch.device) -> dict:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import transformers  # after the line above: the hub reads it when it is imported

    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 on both sides: tokens are compared exactly
    torch.backends.cudnn.allow_tf32 = False
    s = size.shape
    longest = max(size.prompt_lens) + size.new_tokens
    config = transformers.LlamaConfig(
        vocab_size=s.vocab_size, hidden_size=s.hidden_size, intermediate_size=s.intermediate_size,
        num_hidden_layers=s.num_layers, num_attention_heads=s.num_heads, num_key_value_heads=s.num_kv_heads,
        max_position_embeddings=longest + 8, rms_norm_eps=1e-5, rope_theta=10000.0, initializer_range=0.1,
        tie_word_embeddings=False, bos_token_id=None, eos_token_id=None, pad_token_id=None)
    torch.manual_seed(SEED)
    rng = np.random.default_rng(SEED)
    prompts = [rng.integers(0, s.vocab_size, n).tolist() for n in size.prompt_lens]
    with tempfile.TemporaryDirectory() as folder:
        transformers.LlamaForCausalLM(config).save_pretrained(folder, safe_serialization=True)
        ours = load_model(folder)
        hf = transformers.LlamaForCausalLM.from_pretrained(folder, attn_implementation="eager").float().eval()
    hf = hf.to(device)
    reference = [hf_greedy(hf, p, size.new_tokens, device) for p in prompts]
    del hf
    roomy_blocks = sum(num_blocks_for(n + size.new_tokens, size.block_size) for n in size.prompt_lens) + 1
    one = generate(ours, prompts, size.new_tokens, EngineConfig(1, roomy_blocks, block_size=size.block_size),
                   ignore_eos=True, device=device)
    fractions = []
    spill_config = EngineConfig(size.spill_instances, size.spill_blocks_per_instance, block_size=size.block_size,
                                seed=SEED)
    spill = generate(ours, prompts, size.new_tokens, spill_config, ignore_eos=True, device=device,
                     on_step=lambda engine: fractions.append(remote_fraction(engine)))
    one_ok = [a == b for a, b in zip(one.token_ids, reference)]
    spill_ok = [a == b for a, b in zip(spill.token_ids, reference)]
    spread = max(len(p) for p in spill.placement)
    return {"passed": all(one_ok) and all(spill_ok) and max(fractions) > 0,
            "model": asdict(s), "prompt_lens": list(size.prompt_lens), "new_tokens": size.new_tokens,
            "reference": f"transformers {transformers.__version__} LlamaForCausalLM (eager attention, fp32)",
            "one_instance_equal": one_ok, "spilled_equal": spill_ok,
            "spilled": {"instances": size.spill_instances, "blocks_per_instance": size.spill_blocks_per_instance,
                        "block_size": size.block_size, "max_remote_fraction": max(fractions),
                        "most_instances_one_request": spread, "placement": [
                            {str(k): v for k, v in p.items()} for p in spill.placement],
                        "num_preemptions": spill.num_preemptions},
            "headline": {"requests": len(prompts), "one_instance_equal": sum(one_ok), "spilled_equal": sum(spill_ok),
                         "max_remote_fraction": max(fractions)}}
