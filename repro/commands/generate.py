import json
import os

import click

from repro.exit_codes import RequestsFailedExit
from reference_impl.control.sampling import MAX_TEMPERATURE
from repro.options import gmanager_interval_option, parse_int_list, seed_option

MAX_INSTANCES = 256  # instances of one process (each a model replica); more is a cluster's job (--backend ray)
MAX_TOKENS = 10**7  # per prompt or generation: far beyond what a CPU run finishes


def check_kv_fits_memory(model_config, instances: int, blocks_per_instance: int, block_size: int, dtype_bytes: int):
    """The local backend allocates every instance's KV up front: say so before asking for more than the machine has."""
    per_token = 2 * model_config.num_layers * model_config.num_kv_heads * model_config.head_dim * dtype_bytes
    need = instances * blocks_per_instance * block_size * per_token
    have = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    if need > have:
        raise click.UsageError(f"--instances {instances} x --blocks-per-instance {blocks_per_instance} x --block-size "
                               f"{block_size} needs {need / 2**30:.3g} GiB of KV; this machine has {have / 2**30:.3g} GiB")


@click.command("generate")
@click.option("--model", "model_spec", default="tiny", show_default=True,
              help="'tiny' (built in, random weights from --seed, a small byte-level BPE tokenizer) or a Hugging Face "
                   "LLaMA folder.")
@click.option("--instances", default=1, show_default=True, type=click.IntRange(1, MAX_INSTANCES))
@click.option("--blocks-per-instance", default=64, show_default=True, type=click.IntRange(min=1),
              help="rBlocks of KV each instance may hold.")
@click.option("--block-size", default=16, show_default=True, type=click.IntRange(min=1), help="Tokens per rBlock.")
@click.option("--prompt", "prompt_texts", multiple=True, metavar="TEXT",
              help="A text prompt, encoded by the model folder's tokenizer; repeat for more. The output is decoded.")
@click.option("--prompt-ids", multiple=True, help="Comma-separated token ids of one prompt; repeat for more.")
@click.option("--prompt-len", type=click.IntRange(1, MAX_TOKENS), default=None,
              help="Instead of --prompt or --prompt-ids: one random prompt of this length (from --seed).")
@click.option("--max-new-tokens", default=16, show_default=True, type=click.IntRange(1, MAX_TOKENS))
@click.option("--no-pooling", is_flag=True, help="KV never leaves its instance (vLLM-M): preempt and recompute.")
@click.option("--chunked-prefill-tokens", type=click.IntRange(min=1), default=None,
              help="Chunked prefill: each step decodes every running request and prefills prompt chunks in the tokens "
                   "left of this budget (at least --block-size); default: whole prompts in steps of their own.")
@click.option("--ignore-eos", is_flag=True, help="Generate --max-new-tokens even past the EOS token.")
@seed_option
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True,
              help="Where the local backend runs the model and its KV (cuda: one GPU). With --backend ray: cuda gives "
                   "each instance one GPU unless --gpus-per-instance says otherwise.")
@click.option("--temperature", default=0.0, show_default=True, type=click.FloatRange(0, MAX_TEMPERATURE),
              help="0: greedy (the default and the tested reference); above 0: sampled.")
@click.option("--top-p", default=1.0, show_default=True, type=click.FloatRange(0, 1, min_open=True),
              help="Sample from the smallest set of tokens whose probability reaches this.")
@click.option("--sampling-seed", default=None, type=click.IntRange(0, 2**63 - 1),
              help="Seed of each request's draws: its tokens do not depend on what it is batched with (default: the "
                   "engine's one generator, seeded by --seed).")
@click.option("--json", "as_json", is_flag=True,
              help='Print {"token_ids": [[...]], "text": [...] (with --prompt), "placement": [...], "requests": '
                   '[{"status", "reason"}, ...], "wall_s", "output_tok_s"}.')
@click.option("--backend", type=click.Choice(["local", "ray", "vllm"]), default="local", show_default=True,
              help="local: one process; ray: each instance and the gManager a Ray actor; vllm: real vLLM engines "
                   "(--instances of them, vLLM-M; `make setup-vllm`).")
@click.option("--address", default=None, help="With --backend ray: a Ray cluster to join (default: start one here).")
@click.option("--ray-cpus", default=2, show_default=True, type=click.IntRange(min=1),
              help="With --backend ray and no --address: CPUs of the Ray started here.")
@click.option("--gpus-per-instance", default=None, type=click.FloatRange(min=0),
              help="With --backend ray: GPUs of each instance's placement-group bundle (default 0: run on CPU; 1 with "
                   "--device cuda).")
@gmanager_interval_option
def generate(model_spec, instances, blocks_per_instance, block_size, prompt_texts, prompt_ids, prompt_len,
             max_new_tokens, no_pooling, chunked_prefill_tokens, ignore_eos, seed, device, temperature, top_p,
             sampling_seed, as_json, backend, address, ray_cpus, gpus_per_instance, gmanager_interval_s):
    """Generation on the engine: the tokens (and text), where each request's rBlocks ended up, wall time and tok/s.

    Greedy unless --temperature > 0. --seed seeds the tiny model's weights, the --prompt-len prompt and the engine's
    sampler; --sampling-seed gives each request its own draws instead. With a small --blocks-per-instance the KV
    spills to other instances and the tokens stay the same. Exit status 3 when some requests failed (an instance
    died and they no longer fit), after printing every request."""
    import time

    import numpy as np

    from reference_impl.backends.local import generate as run_generate
    from reference_impl.control.engine import EngineConfig, GManagerConfig
    from reference_impl.control.sampling import SamplingParams
    from reference_impl.model.resolve import resolve_model

    if sum((bool(prompt_texts), bool(prompt_ids), prompt_len is not None)) != 1:
        raise click.UsageError("give one of --prompt (repeatable), --prompt-ids (repeatable) or --prompt-len")
    sampling = SamplingParams(temperature=temperature, top_p=top_p, seed=sampling_seed)
    if backend != "local" and (not sampling.is_greedy or sampling_seed is not None or top_p != 1.0):
        raise click.UsageError(f"--temperature, --top-p and --sampling-seed run on --backend local; "
                               f"--backend {backend} decodes greedily")
    if backend == "local" and gpus_per_instance is not None:
        raise click.UsageError("--gpus-per-instance is for --backend ray; use --device cuda for the local backend")
    if device == "cuda" and (backend == "local" or (backend == "ray" and address is None)):
        check_cuda()  # (a cluster joined with --address may have GPUs this machine lacks)
    tokenizer = text_tokenizer(model_spec) if prompt_texts else None  # text in, text out
    model = resolve_model(model_spec, seed=seed)
    if backend == "local":
        check_kv_fits_memory(model.config, instances, blocks_per_instance, block_size, model.dtype.itemsize)
    if prompt_len is not None:
        prompts = [np.random.default_rng(seed).integers(0, model.config.vocab_size, prompt_len).tolist()]
    elif prompt_texts:
        prompts = [tokenizer.encode(text) for text in prompt_texts]
    else:
        prompts = [parse_int_list(p, "--prompt-ids") for p in prompt_ids]
    if backend == "vllm":
        from baselines.real_vllm.generate import echo_generate_vllm

        echo_generate_vllm(model_spec, prompts, max_new_tokens, num_engines=instances, ignore_eos=ignore_eos,
                           seed=seed, as_json=as_json)
        return
    config = EngineConfig(num_instances=instances, blocks_per_instance=blocks_per_instance, block_size=block_size,
                          pooling=not no_pooling, seed=seed, chunked_prefill_tokens=chunked_prefill_tokens,
                          gmanager=GManagerConfig(interval_s=gmanager_interval_s))
    failed = {}  # request index -> why it could not finish (the Ray backend, when an instance dies)
    if backend == "ray":
        from reference_impl.backends.ray import RayConfig
        from reference_impl.backends.ray import generate as ray_generate

        gpus = gpus_per_instance if gpus_per_instance is not None else (1.0 if device == "cuda" else 0.0)
        ray_config = RayConfig(address=address, num_cpus=ray_cpus, gpus_per_instance=gpus)
        result = ray_generate(model, prompts, max_new_tokens, config, ray_config, ignore_eos=ignore_eos)
        failed, wall_s = result.failed, result.wall_s
    else:
        start = time.perf_counter()
        result = run_generate(model, prompts, max_new_tokens, config, ignore_eos=ignore_eos, device=device,
                              sampling=sampling)
        wall_s = time.perf_counter() - start
    echo_result(result, failed, block_size, as_json, wall_s, tokenizer)
    if failed:
        raise RequestsFailedExit(failed, len(prompts))


def check_cuda() -> None:
    import torch

    if not torch.cuda.is_available():
        raise click.UsageError("--device cuda: no CUDA device is visible to torch here")


def text_tokenizer(model_spec: str):
    """The model folder's tokenizer (a UsageError where it has none)."""
    from reference_impl.model.resolve import model_folder
    from reference_impl.model.tokenizer import load_tokenizer

    folder = model_folder(model_spec)
    tokenizer = load_tokenizer(folder) if folder is not None and folder.is_dir() else None
    if tokenizer is None:
        raise click.UsageError(f"--prompt needs a tokenizer: model {model_spec!r} has no tokenizer.json; "
                               "give --prompt-ids instead")
    return tokenizer


def echo_result(result, failed: dict[int, str], block_size: int, as_json: bool, wall_s: float,
                tokenizer=None) -> None:
    """Each request's tokens (so far, for a failed one) and their text where the model has a tokenizer, status and
    where its rBlocks ended up, then the wall time and tok/s, on stdout."""
    placement = [[{"inst_id": i, "num_blocks": n} for i, n in sorted(p.items())] for p in result.placement]
    requests = [{"status": "failed" if i in failed else "finished", "reason": failed.get(i)}
                for i in range(len(result.token_ids))]
    texts = [tokenizer.decode(t) for t in result.token_ids] if tokenizer is not None else None
    num_tokens = sum(len(t) for t in result.token_ids)
    tok_s = num_tokens / wall_s if wall_s > 0 else 0.0
    if as_json:
        click.echo(json.dumps({"token_ids": result.token_ids, **({"text": texts} if texts is not None else {}),
                               "placement": placement, "requests": requests, "wall_s": wall_s,
                               "output_tok_s": tok_s}))
        return
    for i, (tokens, where) in enumerate(zip(result.token_ids, placement)):
        blocks = ", ".join(f"instance {w['inst_id']}: {w['num_blocks']}" for w in where) or "none"
        status = f" (failed after {len(tokens)} tokens: {failed[i]})" if i in failed else ""
        click.echo(f"request {i}{status}: {' '.join(map(str, tokens))}")
        if texts is not None:
            click.echo(f"  text: {texts[i]!r}")
        click.echo(f"  rBlocks ({block_size} tokens each) at the end: {blocks}")
    click.echo(f"{result.num_steps} steps, {result.num_preemptions} preemptions")
    click.echo(f"{num_tokens} tokens in {wall_s:.3f} s: {tok_s:.1f} tok/s (wall time of generation, model loading "
               f"excluded)")
