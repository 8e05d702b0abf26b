"""The timed workloads of the speed guard, each a subject (the code under test) and a reference that shares
none of its code, measured in the same run: the ratio reference time / subject time is what the guard keeps.

- attention: MicroAttention (torch path) over paged KV vs torch SDPA on the same KV made contiguous;
- engine-decode: the engine's decode steps on the built-in tiny model vs a plain greedy loop over transformers'
  LlamaForCausalLM of the same shape (its own weights, layers and KV cache);
- sim-events: the simulator serving a fixed trace vs a fixed pure-Python workload (heap events, dict updates);
- sim-step-128: the simulator's cost per event on 128 instances at 2 requests/s a GPU (mostly decode steps: the
  step's pricing, batch and records) vs the same pure-Python workload, held to a 1.5x slowdown;
- gmanager-round-N: one gManager round over N instances vs the same pure-Python workload.

A side is (prepare, run): prepare is not timed, run is. Sizes: "ci" for `make test`, "large" for `make bench`.
"""
import heapq
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
import torch
import torch.nn.functional as F

from reference_impl.control.sequence import Sequence
from reference_impl.kernels import micro_attention
from reference_impl.model.llama import TINY, random_model
from reference_impl.serving.records import RequestRecord
from reference_impl.sim.backend import SimBackend, build_engine
from reference_impl.sim.events import PromptIds
from reference_impl.systems.run import simulate
from reference_impl.systems.registry import cluster, system_config
from repro.attention.bench import MODEL_HEADS, AttentionBenchPoint, contiguous_kv, kv_bytes, paged_inputs
from repro.benchmarks.engine import prefilled_engine
from workloads import generate
from workloads.generate import SourceOptions

SIZES = ("ci", "large")


@dataclass(frozen=True, slots=True)
class Side:
    prepare: Callable[[], object]  # untimed; its result is run's argument
    run: Callable[[object], object]  # timed
    work: float = 1.0  # units of work one run does (tokens, events, rounds), for the per-second rates
    unit: str = "run"


@dataclass(frozen=True, slots=True)
class SpeedCase:
    name: str
    subject: str  # what is under test, for messages
    reference: str
    make: Callable[[str], tuple[Side, Side]]  # size -> (subject, reference)
    num_rounds: int = 7  # timed rounds of each side, interleaved
    tolerance: float | None = None  # the slowdown it may show before failing (None: the baseline's)


def pure_python_work(num_events: int) -> int:
    """A fixed pure-Python workload: a heap of 64 timed events, each popped, counted and rescheduled."""
    heap = [(i * 0.37 % 1.0, i) for i in range(64)]
    heapq.heapify(heap)
    counts, total = {}, 0
    for _ in range(num_events):
        time_s, key = heapq.heappop(heap)
        counts[key % 97] = counts.get(key % 97, 0) + 1
        total += key
        heapq.heappush(heap, (time_s + (key % 13 + 1) * 0.01, key + 1))
    return total


def pure_python_side(num_events: int) -> Side:
    return Side(lambda: num_events, pure_python_work, num_events, "event")


def attention(size: str) -> tuple[Side, Side]:
    # GQA heads: SDPA's grouped path moves memory like ours, so their ratio holds under a neighbour's load
    model, ctx, batch, calls = ("llama2-70b", 1024, 4, 8) if size == "ci" else ("llama2-70b", 8192, 8, 2)
    hq, hkv, d = MODEL_HEADS[model]
    point = AttentionBenchPoint(model, hq, hkv, d, ctx, batch, kv_bytes(batch, ctx, hkv, d, torch.float32))
    q, k_cache, v_cache, block_table, seq_lens = paged_inputs(point, torch.device("cpu"), torch.float32,
                                                              torch.Generator().manual_seed(0))
    k, v = contiguous_kv(k_cache, v_cache, block_table, ctx)
    q4 = q[:, :, None, :]  # [B, Hq, 1, D]

    def ours(_):
        for _ in range(calls):
            micro_attention(q, k_cache, v_cache, block_table, seq_lens, backend="torch", check_ranges=False)

    def sdpa(_):
        for _ in range(calls):
            F.scaled_dot_product_attention(q4, k, v, enable_gqa=hq != hkv)

    work = calls * point.kv_bytes / 1e9
    return Side(lambda: None, ours, work, "GB of KV"), Side(lambda: None, sdpa, work, "GB of KV")


def engine_decode(size: str) -> tuple[Side, Side]:
    batch, prompt_len, num_steps = (8, 32, 24) if size == "ci" else (32, 64, 96)
    model = random_model(TINY, 0)
    tokens = batch * (num_steps - 1)

    def engine():
        return prefilled_engine(model, batch, prompt_len, num_steps, 1, 16, np.random.default_rng(0))

    return (Side(engine, lambda e: e.run(), tokens, "token"),
            Side(*hf_llama_decode(TINY, batch, prompt_len, num_steps), tokens, "token"))


def hf_llama_decode(config, batch: int, prompt_len: int, num_steps: int):
    """(prepare, run) of a plain greedy decode loop over transformers' LlamaForCausalLM of `config`'s shape:
    prepare prefills the prompts, run decodes num_steps - 1 tokens with its KV cache."""
    import transformers  # the test extra's, not a dependency: only this case needs it

    hf_config = transformers.LlamaConfig(
        vocab_size=config.vocab_size, hidden_size=config.hidden_size, intermediate_size=config.intermediate_size,
        num_hidden_layers=config.num_layers, num_attention_heads=config.num_heads,
        num_key_value_heads=config.num_kv_heads, rms_norm_eps=config.rms_norm_eps, rope_theta=config.rope_theta,
        max_position_embeddings=prompt_len + num_steps, tie_word_embeddings=config.tie_word_embeddings)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(hf_config).eval()
    prompts = torch.randint(0, config.vocab_size, (batch, prompt_len), generator=torch.Generator().manual_seed(0))

    def prefill():
        with torch.inference_mode():
            return model(prompts, use_cache=True)

    def decode(out):
        with torch.inference_mode():
            for _ in range(num_steps - 1):
                tokens = out.logits[:, -1].argmax(-1, keepdim=True)
                out = model(tokens, past_key_values=out.past_key_values, use_cache=True)

    return prefill, decode


def sim_events(size: str) -> tuple[Side, Side]:
    num_requests, num_events = (100, 150_000) if size == "ci" else (600, 900_000)
    config = system_config("infinite-llm", cluster("llama2-7b", "A100-80GB-SXM", 4))
    requests = generate(trace_id=0, num_requests=num_requests, rate_per_s=20.0, seed=0,
                        options=SourceOptions(source="fitted"))
    count = [0]

    def run(_):
        count[0] = 0
        simulate(config, requests, on_event=lambda now_s: count.__setitem__(0, count[0] + 1))

    run(None)  # the event count of this fixed workload
    return Side(lambda: None, run, count[0], "event"), pure_python_side(num_events)


def sim_step(num_gpus: int) -> Callable[[str], tuple[Side, Side]]:
    """Infinite-LLM on `num_gpus` instances of one A100 serving trace 0 at 2 requests/s a GPU (the scale bench's
    goal rate): steps of small batches on many instances, where the per-step constant is the cost."""
    def make(size: str) -> tuple[Side, Side]:
        num_requests, num_events = (300, 450_000) if size == "ci" else (3000, 4_500_000)
        config = system_config("infinite-llm", cluster("llama2-7b", "A100-80GB-SXM", num_gpus))
        requests = generate(trace_id=0, num_requests=num_requests, rate_per_s=2.0 * num_gpus, seed=0,
                            options=SourceOptions(source="fitted"))
        count = [0]

        def run(_):
            count[0] = 0
            simulate(config, requests, on_event=lambda now_s: count.__setitem__(0, count[0] + 1))

        run(None)
        return Side(lambda: None, run, count[0], "event"), pure_python_side(num_events)
    return make


def gmanager_round(num_instances: int) -> Callable[[str], tuple[Side, Side]]:
    """One gManager round after full heartbeats (untimed), which give it a new map each time, so every round is
    computed, not its memo returned."""
    def make(size: str) -> tuple[Side, Side]:
        engine = loaded_engine(num_instances, 1 if size == "ci" else 3)

        def heartbeats():
            engine.heartbeats(full=True)
            return engine

        return (Side(heartbeats, lambda e: e.gmanager_round(), 1, "round"),
                pure_python_side(100 * num_instances))
    return make


def loaded_engine(num_instances: int, load: int = 1):
    """A simulated cluster of LLaMA2-7B instances with long (trace 8) and short (trace 0) requests added and
    one step run, so the gManager has debtors, creditors and moves to plan; `load` multiplies the requests."""
    fitted = SourceOptions(source="fitted")
    scale = load * num_instances / 32
    requests = generate(trace_id=8, num_requests=max(6, int(6 * scale)), rate_per_s=1.0, seed=0, options=fitted)
    requests += [replace(r, req_id=100_000 + i) for i, r in enumerate(
        generate(trace_id=0, num_requests=int(200 * scale), rate_per_s=100.0, seed=0, options=fitted))]
    config = cluster("llama2-7b", "A100-80GB-SXM", num_instances)
    records = {r.req_id: RequestRecord(r.req_id, 0.0, r.prompt_len, r.output_len) for r in requests}
    engine = build_engine(config, SimBackend(config, records))
    for r in requests:
        engine.add_request(Sequence(r.req_id, PromptIds(r.prompt_len), r.output_len))
    engine.heartbeats()
    for inst in engine.instances:
        engine.backend.step(inst)
    engine.heartbeats()
    return engine


CASES = (
    SpeedCase("attention", "MicroAttention, torch path, paged KV", "torch SDPA on contiguous KV", attention),
    SpeedCase("engine-decode", "engine decode, tiny model, local backend",
              "transformers LlamaForCausalLM greedy loop", engine_decode),
    SpeedCase("sim-events", "simulator events", "pure-Python heap events", sim_events),
    SpeedCase("sim-step-128", "simulator events, 128 instances", "pure-Python heap events", sim_step(128),
              tolerance=1.5),
    SpeedCase("gmanager-round-32", "gManager round, 32 instances", "pure-Python heap events", gmanager_round(32),
              num_rounds=30),
    SpeedCase("gmanager-round-256", "gManager round, 256 instances", "pure-Python heap events",
              gmanager_round(256), num_rounds=20),
)
BY_NAME = {c.name: c for c in CASES}
