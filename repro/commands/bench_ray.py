"""`repro bench ray`: the same greedy generation on the local backend and on the Ray backend, tok/s and time
per engine step of each, measured in the same run; the tokens must agree. Both run torch with one thread per
instance (the Ray actors' default), so the difference is the actors' messaging, not thread counts."""
import json
import time
from dataclasses import asdict, dataclass

import click


@dataclass(frozen=True, slots=True)
class RayPoint:
    setting: str  # "roomy": every request fits its instance; "spread": KV spills onto other instances
    backend: str
    num_steps: int
    num_tokens: int
    wall_s: float
    tok_s: float
    step_ms: float
    off_main_kv_fraction: float  # of all rBlocks at the end, held off the instance holding most of the request


def measure(model, prompts, max_new_tokens, config, ray_config):
    from reference_impl.backends.local import generate as local_generate
    from reference_impl.backends.ray import generate as ray_generate

    t0 = time.perf_counter()
    local = local_generate(model, prompts, max_new_tokens, config, ignore_eos=True)
    local_s = time.perf_counter() - t0
    on_ray = ray_generate(model, prompts, max_new_tokens, config, ray_config, ignore_eos=True)
    if on_ray.token_ids != local.token_ids:
        raise click.ClickException("the Ray backend's tokens differ from the local backend's")
    return [(local, local_s), (on_ray, on_ray.wall_s)]


def off_main_fraction(placement) -> float:
    total = sum(sum(p.values()) for p in placement)
    return sum(sum(p.values()) - max(p.values(), default=0) for p in placement) / max(1, total)


@click.command("ray")
@click.option("--instances", default=3, show_default=True, type=click.IntRange(min=2))
@click.option("--batch", default=6, show_default=True, type=click.IntRange(min=1), help="Requests.")
@click.option("--prompt-len", default=48, show_default=True, type=click.IntRange(min=1))
@click.option("--max-new-tokens", default=32, show_default=True, type=click.IntRange(min=2))
@click.option("--block-size", default=16, show_default=True, type=click.IntRange(min=1))
@click.option("--address", default=None, help="A Ray cluster to join (default: start one here).")
@click.option("--ray-cpus", default=2, show_default=True, type=click.IntRange(min=1))
@click.option("--seed", default=0, show_default=True, type=int)
@click.option("--out", type=click.Path(dir_okay=False), default=None, help="Also write the points as JSON.")
def bench_ray(instances, batch, prompt_len, max_new_tokens, block_size, address, ray_cpus, seed, out):
    """Tiny model: Ray backend vs local backend, tok/s and ms per step, roomy and spread KV.

    Request i has a prompt of (i + 1) * --prompt-len tokens. roomy: every instance could hold all requests;
    spread: the instances together hold them with two rBlocks to spare, so the long ones spill."""
    import numpy as np
    import ray
    import torch

    from reference_impl.atomic import write_text_atomic
    from reference_impl.backends.ray import RayConfig, init_ray
    from reference_impl.engine import EngineConfig
    from reference_impl.model import TINY, random_model
    from reference_impl.sequence import num_blocks_for

    model = random_model(TINY, seed=seed)
    rng = np.random.default_rng(seed)
    prompts = [rng.integers(0, model.config.vocab_size, (i + 1) * prompt_len).tolist() for i in range(batch)]
    total = sum(num_blocks_for(len(p) + max_new_tokens, block_size) for p in prompts)
    settings = {"roomy": total, "spread": -(-total // instances) + 2}
    torch.set_num_threads(1)
    ray_config = RayConfig(address=address, num_cpus=ray_cpus)
    started = init_ray(ray_config)
    points = []
    try:
        for setting, blocks in settings.items():
            config = EngineConfig(instances, blocks, block_size=block_size, seed=seed)
            for name, (result, wall_s) in zip(("local", "ray"), measure(model, prompts, max_new_tokens, config,
                                                                       ray_config)):
                num_tokens = sum(len(t) for t in result.token_ids)
                points.append(RayPoint(setting, name, result.num_steps, num_tokens, wall_s, num_tokens / wall_s,
                                       1e3 * wall_s / result.num_steps, off_main_fraction(result.placement)))
    finally:
        if started:
            ray.shutdown()
    click.echo(f"{'setting':8} {'backend':7} {'steps':>5} {'tokens':>6} {'tok/s':>8} {'ms/step':>8} {'KV off main':>11}")
    for p in points:
        click.echo(f"{p.setting:8} {p.backend:7} {p.num_steps:5d} {p.num_tokens:6d} {p.tok_s:8.1f} {p.step_ms:8.2f} "
                   f"{p.off_main_kv_fraction:11.2f}")
    for setting in dict.fromkeys(p.setting for p in points):
        local, on_ray = [p for p in points if p.setting == setting]
        click.echo(f"{setting}: Ray adds {on_ray.step_ms - local.step_ms:.2f} ms per step "
                   f"({on_ray.tok_s / local.tok_s:.2f}x the local tok/s)")
    if out:
        write_text_atomic(out, json.dumps([asdict(p) for p in points], indent=1) + "\n")
