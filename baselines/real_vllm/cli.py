"""`repro compare-vllm`: our local engine vs real vLLM on the same model and requests (see baselines.real_vllm.compare)."""
import click

from baselines.real_vllm.compare_config import CompareConfig

DEFAULTS = CompareConfig()


@click.command("compare-vllm")
@click.option("--model", default=DEFAULTS.model, show_default=True,
              help="'tiny' (random from --seed, saved as a Hugging Face folder for vLLM) or a LLaMA folder.")
@click.option("--trace", "trace_id", default=DEFAULTS.trace_id, show_default=True, type=int,
              help="Trace of infinite-llm Table 1 whose (fitted) lengths the requests take.")
@click.option("--num-requests", default=DEFAULTS.num_requests, show_default=True, type=click.IntRange(min=1))
@click.option("--max-prompt-len", default=DEFAULTS.max_prompt_len, show_default=True, type=click.IntRange(min=1))
@click.option("--max-output-len", default=DEFAULTS.max_output_len, show_default=True, type=click.IntRange(min=1))
@click.option("--cpu-threads", default=DEFAULTS.cpu_threads, show_default=True, type=click.IntRange(min=1),
              help="Threads of each system on CPU (torch threads of ours, cores vLLM binds).")
@click.option("--seed", default=DEFAULTS.seed, show_default=True, type=int)
@click.option("--out", "out_path", default="results/compare-vllm/result.json", show_default=True,
              help="Where the comparison JSON goes (written atomically).")
@click.option("--log", "log_path", default=None, help="Keep vLLM's own output in this file.")
def compare_vllm(model, trace_id, num_requests, max_prompt_len, max_output_len, cpu_threads, seed, out_path,
                 log_path):
    """Greedy tokens and throughput of our engine and of real vLLM, same folder, same requests, one run."""
    from baselines.real_vllm.backend import check_vllm, vllm_python
    from baselines.real_vllm.compare import compare, format_table
    from reference_impl.atomic import check_writable_file, write_json_atomic

    check_writable_file(out_path, "--out")
    if log_path:
        check_writable_file(log_path, "--log")
    check_vllm(vllm_python())  # before minutes of local generation
    config = CompareConfig(model, trace_id, num_requests, max_prompt_len, max_output_len, cpu_threads=cpu_threads,
                           seed=seed)
    result = compare(config, log_path=log_path)
    write_json_atomic(out_path, result)
    click.echo(format_table(result))
    click.echo(f"wrote {out_path}")
