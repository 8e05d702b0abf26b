import click

from reference_impl.systems.catalog import DESIGN_NAMES
from repro.options import gmanager_interval_option, seed_option

MAX_INSTANCES = 256  # as `repro generate`: more is a cluster's job


@click.command("serve")
@click.option("--model", "model_spec", default="tiny", show_default=True,
              help="'tiny' (a small model folder with a tokenizer and chat template, built on first use), a Hugging "
                   "Face LLaMA folder, or 'device-time:<N>ms'.")
@click.option("--served-model-name", default=None, help="The model id clients send (default: --model as given).")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8000, show_default=True, type=click.IntRange(0, 65535))
@click.option("--instances", default=2, show_default=True, type=click.IntRange(1, MAX_INSTANCES),
              help="Instances in this process (each a model replica); their KV is pooled unless --no-pooling.")
@click.option("--blocks-per-instance", default=64, show_default=True, type=click.IntRange(min=1),
              help="rBlocks of KV each instance may hold.")
@click.option("--block-size", default=16, show_default=True, type=click.IntRange(min=1), help="Tokens per rBlock.")
@click.option("--max-batch-size", default=64, show_default=True, type=click.IntRange(min=1))
@click.option("--no-pooling", is_flag=True, help="KV never leaves its instance (vLLM-M): preempt and recompute.")
@click.option("--chunked-prefill-tokens", type=click.IntRange(min=1), default=None,
              help="Chunked prefill: each step decodes every running request and prefills prompt chunks in the tokens "
                   "left of this budget (at least --block-size); default: whole prompts in steps of their own.")
@click.option("--system", type=click.Choice(DESIGN_NAMES), default=None,
              help="A serving design in place of the pooled engine (the backends each runs: docs/designs.md); "
                   "pd-disaggregation and lamina with --backend ray.")
@click.option("--max-queue", default=256, show_default=True, type=click.IntRange(min=1),
              help="Requests waiting for their first token past which new ones get 503 with Retry-After.")
@click.option("--default-max-tokens", default=16, show_default=True, type=click.IntRange(min=1),
              help="max_tokens of a request that gives none.")
@click.option("--backend", type=click.Choice(["local", "ray"]), default="local", show_default=True,
              help="local: the instances in this process; ray: each instance and the gManager a Ray actor.")
@click.option("--address", default=None, help="With --backend ray: a Ray cluster to join (default: start one here).")
@click.option("--ray-cpus", default=2, show_default=True, type=click.IntRange(min=1),
              help="With --backend ray and no --address: CPUs of the Ray started here.")
@click.option("--log-level", default="info", show_default=True,
              type=click.Choice(["critical", "error", "warning", "info", "debug"]))
@seed_option
@gmanager_interval_option
def serve(model_spec, served_model_name, host, port, instances, blocks_per_instance, block_size, max_batch_size,
          no_pooling, chunked_prefill_tokens, system, max_queue, default_max_tokens, backend, address, ray_cpus,
          log_level, seed, gmanager_interval_s):
    """An OpenAI-compatible server over the engine (completions, chat, streaming, metrics).

    Local backend: --instances in this process, KV pooled; --backend ray: each a Ray actor. Endpoints
    /v1/completions, /v1/chat/completions, /v1/models, /health, /tokenize, /detokenize, /metrics; see
    docs/serving.md."""
    from repro.commands.generate import check_kv_fits_memory
    from reference_impl.server.config import ServerConfig, load_served
    from reference_impl.server.run import serve_forever

    if system is not None and no_pooling:
        raise click.UsageError("--no-pooling is the pooled engine's; with --system the design decides (vllm-m: off)")
    config = ServerConfig(model=model_spec, served_model_name=served_model_name, host=host, port=port,
                          num_instances=instances, blocks_per_instance=blocks_per_instance, block_size=block_size,
                          max_batch_size=max_batch_size, pooling=not no_pooling,
                          chunked_prefill_tokens=chunked_prefill_tokens, system=system, max_queue=max_queue,
                          default_max_tokens=default_max_tokens, backend=backend, ray_address=address,
                          ray_cpus=ray_cpus, seed=seed, gmanager_interval_s=gmanager_interval_s)
    served = load_served(config)  # a bad --model fails here, in one line, before the port is taken
    if backend == "local":
        check_kv_fits_memory(served.model.config, instances, blocks_per_instance, block_size,
                             served.model.dtype.itemsize)
    where = f"folder {served.root}" if served.root else "no tokenizer"
    click.echo(f"serving {served.name} ({where}) on http://{host}:{port}/v1 with {instances} {backend} instances"
               f"{'' if system is None else ' of ' + system}, "
               f"max_model_len {served.max_model_len}", err=True)
    serve_forever(config, log_level=log_level, served=served)
