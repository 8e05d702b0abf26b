"""`repro generate --backend vllm`: the same greedy generation on real vLLM engines (vLLM-M), for token comparison."""
import json
import tempfile

import click

from baselines.real_vllm.backend import run_vllm
from baselines.real_vllm.config import VllmSetup
from baselines.real_vllm.model import TINY_VLLM, model_folder, resolve_for_vllm
from reference_impl.backends.local import check_prompts
from reference_impl.control.sequence import num_blocks_for

BLOCK_SIZE = 32  # vLLM 0.32's CPU attention takes block sizes that are multiples of 32


def generate_vllm(model_spec: str, prompts: list[list[int]], max_new_tokens: int, *, num_engines: int = 1,
                  ignore_eos: bool = False, seed: int = 0, log_path: str | None = None):
    """Greedy tokens of every prompt on `num_engines` vLLM engines (most-free dispatch); returns the VllmRun."""
    model = resolve_for_vllm(model_spec, seed=seed)
    check_prompts(model, prompts)
    longest = max(len(p) for p in prompts) + max_new_tokens
    max_model_len = num_blocks_for(longest, BLOCK_SIZE) * BLOCK_SIZE
    blocks = max(sum(num_blocks_for(len(p) + max_new_tokens, BLOCK_SIZE) for p in prompts),
                 max_model_len // BLOCK_SIZE)
    setup = VllmSetup("vllm-m", num_engines, block_size=BLOCK_SIZE, blocks_per_engine=blocks,
                      max_model_len=max_model_len, seed=seed)
    with tempfile.TemporaryDirectory(prefix="generate-vllm-") as scratch:
        folder = model_folder(model_spec, model, scratch, max_position_embeddings=max(4096, max_model_len))
        return run_vllm(setup, folder, prompts, [max_new_tokens] * len(prompts), ignore_eos=ignore_eos,
                        log_path=log_path)


def echo_generate_vllm(model_spec: str, prompts: list[list[int]], max_new_tokens: int, *, num_engines: int,
                       ignore_eos: bool, seed: int, as_json: bool) -> None:
    run = generate_vllm(model_spec, prompts, max_new_tokens, num_engines=num_engines, ignore_eos=ignore_eos,
                        seed=seed)
    engines = [r.engine for r in run.served]
    if as_json:
        click.echo(json.dumps({"token_ids": run.token_ids, "engine": engines, "vllm_version": run.vllm_version}))
        return
    for i, (tokens, engine) in enumerate(zip(run.token_ids, engines)):
        click.echo(f"request {i}: {' '.join(map(str, tokens))}")
        click.echo(f"  vLLM engine {engine}")
    note = ""
    if model_spec == "tiny":
        note = (f"; 'tiny' here is {TINY_VLLM.num_heads} heads / {TINY_VLLM.num_kv_heads} KV heads (head_dim 32, "
                "what vLLM's CPU attention takes), so compare it with `repro compare-vllm`")
    click.echo(f"vLLM {run.vllm_version}, float32, {num_engines} engine(s), startup {run.startup_s:.1f} s{note}")
