"""Local backend: N instances in one process, each with its own rBlock budget, real tensors and kernels."""
import time
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

import numpy as np
import torch

from reference_impl.backends.clock import make_clock, serve_on_clock
from reference_impl.backends.sp_prefill import plan_segments, prefill_in_threads
from reference_impl.control.engine import Engine, EngineConfig
from reference_impl.errors import InputError
from reference_impl.model.graphs import DecodeGraphs
from reference_impl.model.kv_layer import StepKV
from reference_impl.model.kv_pool import block_bytes, device_blocks_per_instance
from reference_impl.model.llama import LlamaModel
from reference_impl.model.runner import ModelRunner
from reference_impl.model.step_inputs import Locations, TableCache, block_arrays, token_arrays
from reference_impl.control.rblock import CPU, DEVICE
from reference_impl.control.sampling import GREEDY, SamplingParams
from reference_impl.control.sequence import Sequence


class LocalBackend:
    supports_chunked_prefill = True  # a step decodes some requests and prefills prompt chunks of others

    def __init__(self, model: LlamaModel, config: EngineConfig, device="cpu", record_logits: bool = False,
                 inst_ids=None, eager: bool | None = None, graph_max_tokens: int = 8192,
                 sequence_parallel: bool = False, packed_prefill: bool = True):
        """inst_ids: the instances whose caches live here (default all; a Ray actor holds its own only).
        eager: None replays decode steps from CUDA graphs on a GPU (graphs.py) and runs eagerly elsewhere; True
        never; False always (without CUDA the graphs' static-buffer steps run eagerly, for tests).
        graph_max_tokens: the longest context a graph covers (longer steps run eagerly).
        sequence_parallel: a whole-prompt prefill whose prompts lie in one rBlock run per instance is computed by
        those instances, each its own segment (backends/sp_prefill.py; a design's Placement.segments places them so);
        `sp_degrees` counts such prompts by their number of segments.
        packed_prefill: on CUDA a prefill step's prompts attend in one varlen call (False: one SDPA a prompt)."""
        c = model.config
        self.model = model
        self.device = torch.device(device)
        self.record_logits = record_logits
        self.block_size = config.block_size
        self.chunked = config.chunked_prefill_tokens is not None
        self.packed_prefill = packed_prefill
        # The instances held here share one device: one tensor per tier, each instance owning a slice of its
        # blocks, so that the partials of all these locations can run in one micro_attention call.
        insts = list(range(config.num_instances) if inst_ids is None else inst_ids)
        self.caches, self.storage, self.shared = {}, {}, {}
        for tier, n in ((DEVICE, config.blocks_per_instance), (CPU, config.cpu_blocks_per_instance)):
            shape = (c.num_layers, n * len(insts), config.block_size, c.num_kv_heads, c.head_dim)
            k, v = (torch.zeros(shape, dtype=model.dtype, device=self.device) for _ in range(2))
            self.shared[tier] = (k, v)
            for j, inst in enumerate(insts):
                self.caches[(inst, tier)] = (k[:, j * n:(j + 1) * n], v[:, j * n:(j + 1) * n])
                self.storage[(inst, tier)] = (tier, j * n)
        self.locations = Locations(self.caches, self.storage, self.shared)
        self.table_caches: dict[int, TableCache] = {}  # per instance: its requests' tables as arrays
        self.last_decode: dict[int, tuple] = {}  # per instance: (req ids, tables, StepKV) of its last decode step
        self.graphs = None
        if eager is False or (eager is None and self.device.type == "cuda" and isinstance(model, LlamaModel)):
            k, v = self.shared[DEVICE]
            self.graphs = DecodeGraphs(model, k, v, config.max_batch_size,
                                       min(k.shape[1], -(-graph_max_tokens // config.block_size)), self.device,
                                       capture=self.device.type == "cuda")
        self.replay_graphs = self.graphs is not None  # False inside `without_graphs()`
        self.device_key = self.locations.keys.index(DEVICE)
        self.runner = ModelRunner(model, self.device, config.seed, record_logits, self.graphs)
        self.step_times_s: list[float] = []
        self.sequence_parallel = sequence_parallel and not self.chunked
        self.sp_degrees: Counter = Counter()

    @contextmanager
    def without_graphs(self):
        """Decode steps run eagerly inside (graphs on against off in one run, over the same caches)."""
        self.replay_graphs = False
        try:
            yield self
        finally:
            self.replay_graphs = self.graphs is not None

    def copy_blocks(self, pairs) -> None:
        staged = [(dst, self.caches[(src.inst_id, src.device)][0][:, src.address].clone(),
                   self.caches[(src.inst_id, src.device)][1][:, src.address].clone()) for src, dst in pairs]
        for dst, k, v in staged:
            k_cache, v_cache = self.caches[(dst.inst_id, dst.device)]
            k_cache[:, dst.address] = k
            v_cache[:, dst.address] = v

    def step_kv(self, instance, seqs, tokens, is_prefill) -> StepKV:
        tables = instance.rm.tables
        req_ids = [s.req_id for s in seqs]
        cache = self.table_caches.setdefault(instance.inst_id, TableCache())
        kv = None
        # the same batch as the last decode: advance its plan, or replan the changed tables only
        if not is_prefill and not tokens.is_mixed:
            last = self.last_decode.get(instance.inst_id)
            if last is not None and last[0] == req_ids:
                changed = [i for i, (r, t) in enumerate(zip(req_ids, last[1])) if tables[r] != t]
                if not changed:
                    kv = last[2].advance(tokens.num_tokens)
                elif 2 * len(changed) <= len(req_ids):
                    kv = last[2].replan(changed, tokens.num_tokens, [tables[req_ids[i]] for i in changed],
                                        lambda: block_arrays([tables[r] for r in req_ids], self.locations, cache, req_ids))
                if kv is not None:
                    last_tables = list(last[1]) if changed else last[1]
                    for i in changed:
                        last_tables[i] = list(tables[req_ids[i]])
                    self.last_decode[instance.inst_id] = (req_ids, last_tables, kv)
                    return kv
        if len(cache.entries) > 2 * len(tables) + 64:  # forget finished requests' tables
            cache.keep_only(tables)
        blocks = block_arrays([tables[r] for r in req_ids], self.locations, cache, req_ids)
        kv = StepKV(self.caches, None, tokens.num_tokens, tokens.num_new, self.block_size, is_prefill, self.device,
                    locations=self.locations, blocks=blocks, packed=self.packed_prefill)
        if not is_prefill and not kv.is_mixed:
            self.last_decode[instance.inst_id] = (req_ids, [list(tables[r]) for r in req_ids], kv)
        return kv

    @torch.inference_mode()
    def execute(self, instance, seqs: list[Sequence], is_prefill: bool) -> list[int]:
        t0 = time.perf_counter()
        if is_prefill and self.sequence_parallel:
            plan = plan_segments(instance.inst_id, seqs, [instance.rm.tables[s.req_id] for s in seqs], self.block_size)
            if plan is not None:
                hidden = prefill_in_threads(plan, self.model, lambda m: {DEVICE: self.caches[(m, DEVICE)]},
                                            self.block_size, self.device, self.model.config.hidden_size)
                self.sp_degrees.update(d for d in plan.degrees if d > 1)
                token_ids = self.runner.sample(seqs, hidden)
                self.step_times_s.append(time.perf_counter() - t0)
                return token_ids
        tokens = token_arrays(seqs, is_prefill, self.chunked)
        kv = self.step_kv(instance, seqs, tokens, is_prefill)
        graph_rows = None
        if self.replay_graphs and not is_prefill:  # (a chunked step with prompt chunks has no graph)
            rows = None if kv.is_mixed else kv.whole_rows()
            if rows is not None and rows[0] == self.device_key:
                graph_rows = rows[1:]
            else:
                self.graphs.num_eager += 1
        token_ids = self.runner.run(seqs, tokens, kv.attend, graph_rows)
        self.step_times_s.append(time.perf_counter() - t0)
        return token_ids


@dataclass(slots=True)
class GenerationResult:
    token_ids: list[list[int]]
    placement: list[dict[int, int]]  # per request: inst_id -> rBlocks when it finished
    logits: list[list[torch.Tensor]] = field(default_factory=list)
    num_steps: int = 0
    num_preemptions: int = 0


def check_prompts(model: LlamaModel, prompts: list[list[int]]) -> None:
    vocab = model.config.vocab_size
    for i, prompt in enumerate(prompts):
        if not prompt:
            raise InputError(f"prompt {i} is empty")
        bad = [t for t in prompt if not 0 <= t < vocab]
        if bad:
            raise InputError(f"prompt {i} has token id {bad[0]} outside the vocabulary [0, {vocab})")


def generate(model: LlamaModel, prompts: list[list[int]], max_new_tokens: int, config: EngineConfig, *,
             ignore_eos: bool = False, record_logits: bool = False, on_step=None, device="cpu",
             sampling: SamplingParams = GREEDY, eager: bool | None = None,
             gpu_memory_utilization: float | None = None, clock=time.perf_counter) -> GenerationResult:
    """Generation of every prompt on a local cluster on `device` (greedy unless `sampling` says otherwise);
    `on_step(engine)` runs after each step; `clock`: the engine's, for the gManager's interval (control/engine.py). `eager`: see LocalBackend (CUDA graphs for decode on a GPU unless
    True). `gpu_memory_utilization`: on a GPU, size each instance's device-tier KV pool from that fraction of the
    memory left after a warm-up prefill (kv_pool.py) instead of `config.blocks_per_instance`; printed."""
    check_prompts(model, prompts)
    if max_new_tokens < 1:
        raise InputError("--max-new-tokens must be >= 1")
    model = to_device(model, device)
    config = sized_config(model, config, device, gpu_memory_utilization)
    backend = LocalBackend(model, config, device=device, record_logits=record_logits, eager=eager)
    engine = Engine(config, backend, clock=clock)
    eos = None if ignore_eos else model.config.eos_token_id
    seqs = [Sequence(i, list(p), max_new_tokens, eos, sampling=sampling) for i, p in enumerate(prompts)]
    for seq in seqs:
        engine.add_request(seq)
    engine.run(on_step=on_step)
    return GenerationResult([s.output_ids for s in seqs], [s.placement for s in seqs],
                            [s.logits for s in seqs], engine.num_steps, sum(s.num_preemptions for s in seqs))


def sized_config(model, config: EngineConfig, device, gpu_memory_utilization: float | None) -> EngineConfig:
    """`config` with its device-tier pool sized from free GPU memory (printed), or as it is (no fraction, or no GPU)."""
    if gpu_memory_utilization is None or torch.device(device).type != "cuda" or not isinstance(model, LlamaModel):
        return config
    blocks = device_blocks_per_instance(model, config, device, gpu_memory_utilization)
    gib = blocks * config.num_instances * block_bytes(model, config.block_size) / 2**30
    print(f"KV pool: {blocks} rBlocks of {config.block_size} tokens per instance x {config.num_instances} "
          f"({gib:.1f} GiB, {gpu_memory_utilization:.0%} of the GPU's memory after the model and a warm-up prefill)")
    return replace(config, blocks_per_instance=blocks)


def to_device(model: LlamaModel, device) -> LlamaModel:
    """The model with its weights and RoPE table on `device` (the same object when it is there already)."""
    device = torch.device(device)
    if not isinstance(model, LlamaModel):  # a DeviceTimeModel: it moves the model it wraps
        return model.to(device)
    if model.w["model.embed_tokens.weight"].device == device:
        return model
    moved = LlamaModel(model.config, {k: w.to(device) for k, w in model.w.items()}, model.silu_mul_backend)
    moved.inv_freq = model.inv_freq.to(device)
    return moved


def random_prompts(requests, vocab_size: int, seed: int) -> list[list[int]]:
    """Token ids for each request's prompt_len, drawn from `seed` (the content does not change the work)."""
    rng = np.random.default_rng(seed)
    return [rng.integers(0, vocab_size, r.prompt_len).tolist() for r in requests]


def serve(model: LlamaModel, requests, config: EngineConfig, *, seed: int = 0, device="cpu", clock: str = "wall",
          time_limit_s: float = 600.0, eager: bool | None = None):
    """Serve `requests` (workloads.Request) on a local engine against the clock ("wall", or "cpu": this process's
    CPU time, see backends/clock.py); returns a ServingRun (serving/records.py) like the simulator's. Prompts are
    random token ids from `seed`."""
    now, sleep = make_clock(clock)
    engine = Engine(config, LocalBackend(to_device(model, device), config, device=device, eager=eager), clock=now)
    prompts = random_prompts(requests, model.config.vocab_size, seed)
    return serve_on_clock(engine, requests, prompts, time_limit_s=time_limit_s, clock=now, sleep=sleep)
