"""Serving a workload on the Ray backend in real time: the wall-clock serving loop of backends/clock.py (each
request joins the engine at its arrival time, the records are the simulator's, `serving/records.py`), with one
"step" a collection of the tokens the instances reported, since the instances run their own loops (the driver
keeps one results call outstanding per instance, answered as that instance ends a step). A serving experiment
so summarises a Ray run, a local run and a simulated run alike.

Systems are designs (systems/) of the same engine, handed in by the caller: Infinite-LLM pools KV across
instances; vLLM-M keeps it on its instance (preempt and recompute, reject what no instance holds); vLLM-S is one
instance with every block; prefill/decode disaggregation prefills on some instances and moves each request whole
to a decode instance; Lamina keeps every rBlock on its memory instances (`engine_run`: a design's EngineRun).
"""
import time
from dataclasses import asdict, replace

import ray

from reference_impl.backends.clock import serve_on_clock
from reference_impl.backends.local import random_prompts
from reference_impl.backends.ray import RayConfig, RayEngine, init_ray
from reference_impl.backends.ray.stats import LoopStats, StepMeans
from reference_impl.control.engine import EngineConfig
from reference_impl.control.engine_run import EngineRun
from reference_impl.control.placement import Placement
from reference_impl.errors import InputError, RequestsFailed
from reference_impl.model.llama import LlamaModel
from reference_impl.serving.records import FAILED, ServingRun

PUBLISH_S = 0.02  # a loop publishes its counters at its next control phase: this long covers a step


def engine_config(chosen, num_instances: int, blocks_per_instance: int, block_size: int, *,
                  max_batch_size: int | None = None, seed: int = 0, knobs=None) -> EngineConfig:
    """The engine config of the design `chosen` (systems/design.py's Design, looked up by the caller) on
    `num_instances` instances of `blocks_per_instance` rBlocks each: `engine_run(...).config`."""
    return engine_run(chosen, num_instances, blocks_per_instance, block_size, max_batch_size=max_batch_size,
                      seed=seed, knobs=knobs).config


def engine_run(chosen, num_instances: int, blocks_per_instance: int, block_size: int, *,
               max_batch_size: int | None = None, seed: int = 0, knobs=None) -> EngineRun:
    """How the Ray backend runs the design `chosen` on `num_instances` instances of `blocks_per_instance` rBlocks
    each (Design.real_run): its engine config, placement, the instances requests go to and its move rule; `knobs`
    its own, or None. InputError, with a hint, for a design Ray does not run."""
    try:
        return chosen.real_run("ray", num_instances, blocks_per_instance, block_size, max_batch_size=max_batch_size,
                               seed=seed, knobs=knobs)
    except InputError as err:
        raise InputError(f"{err}; use --backend sim") from None


def loop_stats(engine: RayEngine) -> dict[int, LoopStats]:
    """Each instance's loop statistics as of its next control phase."""
    time.sleep(PUBLISH_S)
    engine.poll()
    return engine.stats()


def instance_stats(stats: dict[int, LoopStats]) -> dict:
    """Per-step means over the instances' loops (ms) and the counts the comparison reads, as a results file holds
    them."""
    return asdict(StepMeans.of(stats))


class RayServer:
    """Serves workloads one after another on Ray engines kept warm between them: one engine per engine config,
    started at its first workload, held (paused) between workloads, and reused while it ends each workload idle
    (every request finished)."""

    def __init__(self, model: LlamaModel, ray_config: RayConfig = RayConfig(), *, gmanager_config=None,
                 perf_model=None):
        """gmanager_config, perf_model: the engines' gManager and the cost model its Algorithm 1 reads (RayEngine's
        defaults when None)."""
        self.model, self.ray_config = model, ray_config
        self.engine_kwargs = {"gmanager_config": gmanager_config, "perf_model": perf_model}
        self.engines: dict[tuple, RayEngine] = {}  # (config, placement, homes) -> engine
        self.next_req_id = 0  # request ids stay unique over an engine's life; records get theirs back

    def serve(self, requests, config: EngineConfig, *, seed: int = 0, time_limit_s: float = 600.0,
              placement: Placement = Placement(), homes: tuple[int, ...] | None = None, moves=None
              ) -> tuple[ServingRun, dict[int, LoopStats]]:
        """`requests` against the clock; the records and each instance's loop statistics over this workload.
        placement, homes, moves: a design's placement rules, the instances requests go to and its move rule
        (RayEngine's; a design's EngineRun); an engine is kept per config, placement, homes and rule. Raises
        RequestsFailed when an instance died and some requests no longer fit (the engine is dropped: the next
        workload gets a whole one)."""
        key = (config, placement, homes, moves)
        engine = self.engines.get(key)
        if engine is None:
            engine = self.engines[key] = RayEngine(config, self.model, self.ray_config, placement=placement,
                                                   homes=homes, moves=moves, **self.engine_kwargs)
        else:
            engine.resume()
        before = loop_stats(engine)
        offset = self.next_req_id
        self.next_req_id += max((r.req_id for r in requests), default=0) + 1
        renamed = [replace(r, req_id=r.req_id + offset) for r in requests]
        prompts = random_prompts(requests, self.model.config.vocab_size, seed)
        try:
            result = serve_on_clock(engine, renamed, prompts, time_limit_s=time_limit_s)
            after = loop_stats(engine)
        except BaseException:
            self._drop(key)
            raise
        failed = {r.req_id - offset: engine.failed[r.req_id] for r in result.requests if r.status == FAILED}
        for record in result.requests:
            record.req_id -= offset
        # stopped at the time limit (its leftovers must not run into the next workload) or lost an instance
        if engine.has_work or engine.num_instance_failures:
            self._drop(key)
        else:
            engine.pause()  # held until its next workload: an idle engine's loops and rounds still cost CPU
        if failed:
            raise RequestsFailed(failed, len(requests))
        stats = {i: s - before.get(i, LoopStats()) for i, s in after.items()}
        result.num_moved_blocks = LoopStats.total(stats.values()).num_copied_blocks
        return result, stats

    def _drop(self, key: tuple) -> None:
        self.engines.pop(key).shutdown()

    def close(self) -> None:
        for key in list(self.engines):
            self._drop(key)


def serve(model: LlamaModel, requests, config: EngineConfig, ray_config: RayConfig = RayConfig(), *,
          seed: int = 0, time_limit_s: float = 600.0) -> tuple[ServingRun, dict[int, LoopStats]]:
    """Run `requests` (workloads.Request: arrival_s, prompt_len, output_len) against the clock on Ray actors of a
    fresh engine; returns the records and each instance's loop statistics. Prompts are random token ids from
    `seed`; each request generates exactly its output_len tokens. Requests the cluster cannot hold are rejected;
    those still running at `time_limit_s` stay unfinished."""
    started = init_ray(ray_config)
    server = RayServer(model, ray_config)
    try:
        return server.serve(requests, config, seed=seed, time_limit_s=time_limit_s)
    finally:
        server.close()
        if started:
            ray.shutdown()
