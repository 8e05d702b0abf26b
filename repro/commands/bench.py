import click

from repro.lazy_group import LazyGroup

BENCHMARKS = {
    "attention": ("repro.attention.cli:bench_attention",
                  "Decode attention over paged KV: time, GB/s of KV read, % of the device's peak bandwidth, and "
                  "the speed ratio to torch SDPA on contiguous KV measured in the same run."),
    "engine": ("repro.commands.bench_engine:bench_engine",
               "Tiny-model decode tok/s: the engine with KV on one instance or spread over several (DistAttention "
               "over remote rBlocks, merged with scale_reduce), and a contiguous-KV decode loop of the same model."),
    "ray": ("repro.commands.bench_ray:bench_ray",
            "tok/s of 1, 2, ... instances with the same requests per instance on Ray, beside N independent "
            "engines, and where a step's time goes: control phase, compute, waiting for partners, messaging."),
    "scale": ("repro.benchmarks.scale_cli:bench_scale",
              "The simulator's CPU seconds per 1,000 requests and peak memory from 32 to 8192 GPUs (trace 0, "
              "Infinite-LLM and vLLM-M at 0.5x and 1.5x of saturation, the same requests per GPU), and the "
              "gManager's round at those sizes."),
    "serve": ("repro.commands.bench_serve:bench_serve",
              "Replay a trace or dataset against any OpenAI-compatible endpoint with streaming, by the simulator's "
              "curve method: the serving-point records, and TTFT, TPOT, ITL, e2e (p50, p99), output tok/s and goodput "
              "under the SLO given."),
    "serve-plot": ("repro.commands.bench_serve:bench_serve_plot",
                   "Draw `repro bench serve` records side by side (steady output tok/s, p50 TTFT and TPOT against the "
                   "offered rate) and print the ratios of the first record to each other one."),
    "sweep": ("repro.commands.bench_sweep:bench_sweep",
              "Per-point overhead of simulated points on Ray against the local pool (1 and 2 workers), and the quick "
              "figure set's task graph scheduled on 16, 64 and 256 cores."),
}


@click.group(cls=LazyGroup, lazy=BENCHMARKS)
def bench():
    """Micro-benchmarks measured on the machine at hand."""
