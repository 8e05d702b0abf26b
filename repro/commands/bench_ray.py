"""`repro bench ray`: how the Ray backend scales with instances at the same load per instance, beside the local
backend (every instance in one process, one after another) measured in the same run; the tokens must agree.
Each instance actor runs torch on one thread, so N instances want N CPUs: on this 2-core machine 1 and 2."""
import json
import statistics
import time
from dataclasses import asdict, dataclass

import click


@dataclass(frozen=True, slots=True)
class ScalingPoint:
    num_instances: int
    num_requests: int
    num_tokens: int  # generated per run
    local_tok_s: float
    ray_tok_s: list[float]  # one per repeat
    ray_step_ms: float  # per instance and step, median over repeats
    messaging_ms_per_step: float  # of which waiting on the control token, the plans, tensor transfers

    @property
    def ray_median_tok_s(self) -> float:
        return statistics.median(self.ray_tok_s)


def run_once(engine, prompts, max_new_tokens, seed_id: int):
    from reference_impl.sequence import Sequence

    seqs = [Sequence(seed_id + i, list(p), max_new_tokens) for i, p in enumerate(prompts)]
    before = {i: dict(s) for i, s in engine.stats().items()}
    t0 = time.perf_counter()
    for seq in seqs:
        engine.add_request(seq)
    engine.run()
    wall_s = time.perf_counter() - t0
    time.sleep(0.05)  # the stats of the last step are published at the next control phase
    engine.poll()
    after = engine.stats()
    steps = sum(after[i]["num_steps"] - before.get(i, {}).get("num_steps", 0) for i in after)
    step_s = sum(after[i]["step_s"] - before.get(i, {}).get("step_s", 0.0) for i in after)
    msg_s = sum(after[i]["messaging_s"] - before.get(i, {}).get("messaging_s", 0.0) for i in after)
    return [s.output_ids for s in seqs], wall_s, step_s / max(1, steps), msg_s / max(1, steps)


@click.command("ray")
@click.option("--instances", "instance_counts", default="1,2", show_default=True,
              help="Comma-separated instance counts to measure.")
@click.option("--requests-per-instance", default=8, show_default=True, type=click.IntRange(min=1))
@click.option("--prompt-len", default=32, show_default=True, type=click.IntRange(min=1))
@click.option("--max-new-tokens", default=32, show_default=True, type=click.IntRange(min=2))
@click.option("--layers", default=8, show_default=True, type=click.IntRange(min=1))
@click.option("--hidden", default=1024, show_default=True, type=click.IntRange(min=64))
@click.option("--block-size", default=16, show_default=True, type=click.IntRange(min=1))
@click.option("--repeats", default=3, show_default=True, type=click.IntRange(min=1))
@click.option("--address", default=None, help="A Ray cluster to join (default: start one here).")
@click.option("--ray-cpus", default=2, show_default=True, type=click.IntRange(min=1))
@click.option("--seed", default=0, show_default=True, type=int)
@click.option("--out", type=click.Path(dir_okay=False), default=None, help="Also write the points as JSON.")
def bench_ray(instance_counts, requests_per_instance, prompt_len, max_new_tokens, layers, hidden, block_size,
              repeats, address, ray_cpus, seed, out):
    """Random LLaMA (--layers, --hidden): tok/s of 1, 2, ... instances with the same requests per instance,
    on Ray (each instance an actor, all stepping at once) and on the local backend, and the time per step the
    Ray instances spend in messaging. KV is roomy: no request spreads, so this measures the engine's scaling."""
    import numpy as np
    import ray
    import torch

    from reference_impl.atomic import check_writable_file, write_text_atomic
    from reference_impl.backends.local import generate as local_generate
    from reference_impl.backends.ray import RayConfig, RayEngine, init_ray
    from reference_impl.engine import EngineConfig
    from reference_impl.errors import InputError
    from reference_impl.model import ModelConfig, random_model
    from reference_impl.sequence import num_blocks_for

    try:
        counts = [int(n) for n in instance_counts.split(",")]
    except ValueError:
        raise InputError(f"--instances must be comma-separated integers, got {instance_counts!r}") from None
    if not counts or min(counts) < 1:
        raise InputError("--instances must list counts >= 1")
    if out:
        check_writable_file(out, "--out")  # before minutes of runs
    heads = max(1, hidden // 64)
    model = random_model(ModelConfig(vocab_size=4096, hidden_size=hidden, intermediate_size=hidden * 8 // 3,
                                     num_layers=layers, num_heads=heads, num_kv_heads=max(1, heads // 4)), seed=seed)
    rng = np.random.default_rng(seed)
    torch.set_num_threads(1)
    ray_config = RayConfig(address=address, num_cpus=ray_cpus, cpus_per_instance=min(1.0, ray_cpus / max(counts)))
    started = init_ray(ray_config)
    points = []
    try:
        for n in counts:
            prompts = [rng.integers(0, model.config.vocab_size, prompt_len).tolist()
                       for _ in range(n * requests_per_instance)]
            blocks = requests_per_instance * num_blocks_for(prompt_len + max_new_tokens, block_size)
            config = EngineConfig(n, blocks, block_size=block_size, max_batch_size=requests_per_instance, seed=seed)
            t0 = time.perf_counter()
            local = local_generate(model, prompts, max_new_tokens, config, ignore_eos=True)
            local_s = time.perf_counter() - t0
            num_tokens = sum(len(t) for t in local.token_ids)
            engine = RayEngine(config, model, ray_config)
            try:
                run_once(engine, prompts, max_new_tokens, 10_000)  # warm-up: first steps of fresh actors
                runs = [run_once(engine, prompts, max_new_tokens, 20_000 * (r + 1)) for r in range(repeats)]
            finally:
                engine.shutdown()
            if any(tokens != local.token_ids for tokens, *_ in runs):
                raise click.ClickException("the Ray backend's tokens differ from the local backend's")
            points.append(ScalingPoint(n, len(prompts), num_tokens, num_tokens / local_s,
                                       [num_tokens / wall_s for _, wall_s, _, _ in runs],
                                       1e3 * statistics.median(r[2] for r in runs),
                                       1e3 * statistics.median(r[3] for r in runs)))
    finally:
        if started:
            ray.shutdown()
    base = points[0].ray_median_tok_s / points[0].num_instances
    click.echo(f"{'instances':>9} {'requests':>8} {'local tok/s':>11} {'Ray tok/s (min-max)':>22} "
               f"{'per 1 inst':>10} {'ms/step':>7} {'msg ms/step':>11}")
    for p in points:
        spread = f"{p.ray_median_tok_s:.1f} ({min(p.ray_tok_s):.1f}-{max(p.ray_tok_s):.1f})"
        click.echo(f"{p.num_instances:9d} {p.num_requests:8d} {p.local_tok_s:11.1f} {spread:>22} "
                   f"{p.ray_median_tok_s / base:9.2f}x {p.ray_step_ms:7.1f} {p.messaging_ms_per_step:11.2f}")
    if out:
        write_text_atomic(out, json.dumps([{**asdict(p), "ray_median_tok_s": p.ray_median_tok_s} for p in points],
                                          indent=1) + "\n")
