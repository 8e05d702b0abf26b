import json
import os

import click

from repro.exit_codes import RequestsFailedExit
from repro.options import parse_int_list, seed_option

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
              help="'tiny' (built in, random weights from --seed) or a Hugging Face LLaMA folder.")
@click.option("--instances", default=1, show_default=True, type=click.IntRange(1, MAX_INSTANCES))
@click.option("--blocks-per-instance", default=64, show_default=True, type=click.IntRange(min=1),
              help="rBlocks of KV each instance may hold.")
@click.option("--block-size", default=16, show_default=True, type=click.IntRange(min=1), help="Tokens per rBlock.")
@click.option("--prompt-ids", multiple=True, help="Comma-separated token ids of one prompt; repeat for more.")
@click.option("--prompt-len", type=click.IntRange(1, MAX_TOKENS), default=None,
              help="Instead of --prompt-ids: one random prompt of this length (from --seed).")
@click.option("--max-new-tokens", default=16, show_default=True, type=click.IntRange(1, MAX_TOKENS))
@click.option("--no-pooling", is_flag=True, help="KV never leaves its instance (vLLM-M): preempt and recompute.")
@click.option("--ignore-eos", is_flag=True, help="Generate --max-new-tokens even past the EOS token.")
@seed_option
@click.option("--json", "as_json", is_flag=True,
              help='Print {"token_ids": [[...]], "placement": [...], "requests": [{"status", "reason"}, ...]}.')
@click.option("--backend", type=click.Choice(["local", "ray", "vllm"]), default="local", show_default=True,
              help="local: one process; ray: each instance and the gManager a Ray actor; vllm: real vLLM engines "
                   "(--instances of them, vLLM-M; `make setup-vllm`).")
@click.option("--address", default=None, help="With --backend ray: a Ray cluster to join (default: start one here).")
@click.option("--ray-cpus", default=2, show_default=True, type=click.IntRange(min=1),
              help="With --backend ray and no --address: CPUs of the Ray started here.")
@click.option("--gpus-per-instance", default=0.0, show_default=True, type=click.FloatRange(min=0),
              help="With --backend ray: GPUs of each instance's placement-group bundle (0: run on CPU).")
def generate(model_spec, instances, blocks_per_instance, block_size, prompt_ids, prompt_len, max_new_tokens,
             no_pooling, ignore_eos, seed, as_json, backend, address, ray_cpus, gpus_per_instance):
    """Greedy generation on the local backend; prints the tokens and where each request's rBlocks ended up.

    With a small --blocks-per-instance the KV spills to other instances and the tokens stay the same. Exit status 3
    when some requests failed (an instance died and they no longer fit), after printing every request."""
    import numpy as np

    from reference_impl.backends.local import generate as run_generate
    from reference_impl.control.engine import EngineConfig
    from reference_impl.model.resolve import resolve_model

    if bool(prompt_ids) == (prompt_len is not None):
        raise click.UsageError("give either --prompt-ids (repeatable) or --prompt-len")
    model = resolve_model(model_spec, seed=seed)
    if backend == "local":
        check_kv_fits_memory(model.config, instances, blocks_per_instance, block_size, model.dtype.itemsize)
    if prompt_len is not None:
        prompts = [np.random.default_rng(seed).integers(0, model.config.vocab_size, prompt_len).tolist()]
    else:
        prompts = [parse_int_list(p, "--prompt-ids") for p in prompt_ids]
    if backend == "vllm":
        from baselines.real_vllm.generate import echo_generate_vllm

        echo_generate_vllm(model_spec, prompts, max_new_tokens, num_engines=instances, ignore_eos=ignore_eos,
                           seed=seed, as_json=as_json)
        return
    config = EngineConfig(num_instances=instances, blocks_per_instance=blocks_per_instance, block_size=block_size,
                          pooling=not no_pooling, seed=seed)
    failed = {}  # request index -> why it could not finish (the Ray backend, when an instance dies)
    if backend == "ray":
        from reference_impl.backends.ray import RayConfig
        from reference_impl.backends.ray import generate as ray_generate

        ray_config = RayConfig(address=address, num_cpus=ray_cpus, gpus_per_instance=gpus_per_instance)
        result = ray_generate(model, prompts, max_new_tokens, config, ray_config, ignore_eos=ignore_eos)
        failed = result.failed
    else:
        result = run_generate(model, prompts, max_new_tokens, config, ignore_eos=ignore_eos)
    echo_result(result, failed, block_size, as_json)
    if failed:
        raise RequestsFailedExit(failed, len(prompts))


def echo_result(result, failed: dict[int, str], block_size: int, as_json: bool) -> None:
    """Each request's tokens (so far, for a failed one), status and where its rBlocks ended up, on stdout."""
    placement = [[{"inst_id": i, "num_blocks": n} for i, n in sorted(p.items())] for p in result.placement]
    requests = [{"status": "failed" if i in failed else "finished", "reason": failed.get(i)}
                for i in range(len(result.token_ids))]
    if as_json:
        click.echo(json.dumps({"token_ids": result.token_ids, "placement": placement, "requests": requests}))
        return
    for i, (tokens, where) in enumerate(zip(result.token_ids, placement)):
        blocks = ", ".join(f"instance {w['inst_id']}: {w['num_blocks']}" for w in where) or "none"
        status = f" (failed after {len(tokens)} tokens: {failed[i]})" if i in failed else ""
        click.echo(f"request {i}{status}: {' '.join(map(str, tokens))}")
        click.echo(f"  rBlocks ({block_size} tokens each) at the end: {blocks}")
    click.echo(f"{result.num_steps} steps, {result.num_preemptions} preemptions")
