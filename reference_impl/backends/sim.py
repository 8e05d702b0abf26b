"""Sim backend: a discrete-event clock over the engine's own control plane, step times from the cost model.

    from reference_impl.backends.sim import simulate
    from reference_impl.sim.config import SimConfig
    from baselines import vllm_m, vllm_s
    config = SimConfig(model="llama2-7b", gpu="A100-80GB-SXM", num_instances=32, tp=1)  # Infinite-LLM
    result = simulate(config, requests)          # requests: workloads.Request list (arrival_s, prompt/output len)
    result = simulate(vllm_m(config), requests)  # same instances, pooling off: oversize requests are rejected
    result = simulate(vllm_s(config), requests)  # one instance of all GPUs, TP in a node, PP across nodes
    result.requests        # RequestMetrics per request: status, inst_id, first_token_s, finish_s, preemptions
    result.summary()       # output_tok_s, mean/p99 latency, counts finished/rejected/unfinished
    result.throughput_over_time(bin_s=1.0, inst_ids=None)   # (bin start [n], tokens/s [n])

Events: arrivals (dispatch to the most free memory: Engine.add_request), instance steps (Instance.step: one
KV-move chunk, schedule, execute, postprocess), and periodic gManager rounds (heartbeats, recalls,
Algorithm 1, DGFM: Engine.gmanager_round). Each instance steps on its own clock: a step's duration is
`step_time_s` of the calibrated model for what the step does; the instance's state changes when the step
starts and its tokens count when it ends. Model of time:
- decode: batch = the step's requests; KV read = every block physically on this instance (own requests'
  and the remote requests it hosts: Eq. 6's creditor term); remote queries = (request, creditor) pairs.
- prefill: prompt tokens (non-attention) plus causal attention pairs, split by where the request's blocks
  are (the engine's split causal prefill); a creditor's share is added to its next step.
- KV moves and DGFM swaps: transfer time on the link, overlapped with the source's next step (max of both).
Same config and requests, same result, bit for bit: ties break by event order; no wall clock is read.
"""
import heapq
import itertools

from reference_impl.engine import Engine, EngineConfig
from reference_impl.gmanager import GManagerConfig
from reference_impl.perf_model import InstanceLoad, causal_prefill_pairs, step_time_s
from reference_impl.sequence import Sequence, num_blocks_for
from reference_impl.sim.config import SimConfig, blocks_per_instance, perf_model
from reference_impl.sim.metrics import FINISHED, REJECTED, RequestMetrics, SimResult

ARRIVAL, STEP, ROUND = 0, 1, 2
MAX_IDLE_ROUNDS = 50  # rounds with waiting requests but no instance able to run: the rest is stuck


class SimBackend:
    """The engine's Backend: execute() returns dummy tokens and computes how long the step takes."""

    def __init__(self, config: SimConfig, metrics: dict[int, RequestMetrics], result: SimResult, *,
                 prefill_elsewhere: bool = False):
        self.config = config
        self.prefill_elsewhere = prefill_elsewhere
        self.model = perf_model(config)
        self.metrics = metrics
        self.result = result
        self.now_s = 0.0
        self.duration_s: float | None = None
        self.extra_s: dict[int, float] = {}  # creditors' share of others' prefill attention, due next step
        self.move_tokens: dict[int, int] = {}  # KV tokens each instance sent, overlapped with its next step

    def copy_blocks(self, pairs) -> None:
        for src, _ in pairs:
            self.move_tokens[src.inst_id] = self.move_tokens.get(src.inst_id, 0) + self.config.block_size
        self.result.num_moved_blocks += len(pairs)

    def execute(self, instance, seqs: list[Sequence], is_prefill: bool) -> list[int]:
        rm, bs, model = instance.rm, self.config.block_size, self.model
        remote_queries = 0
        if is_prefill and self.prefill_elsewhere:
            compute_s = 0.0  # the prompt's KV arrives ready from a separate prefill pool (not modelled)
        elif is_prefill:
            prompt_tokens, local_pairs, remote_s = 0, 0.0, 0.0
            for seq in seqs:
                n = seq.num_tokens
                prompt_tokens += n
                pairs = causal_prefill_pairs(n)
                total = len(rm.tables[seq.req_id])
                here = rm.hosted.get(seq.req_id, 0)
                local_pairs += pairs * here / total
                if here < total:
                    for inst_id, peer in rm.peers.items():
                        share = peer.hosted.get(seq.req_id, 0) if inst_id != rm.inst_id else 0
                        if share:
                            remote_queries += 1
                            t = model.num_layers * pairs * share / total * model.prefill_attn_s_per_pair
                            self.extra_s[inst_id] = self.extra_s.get(inst_id, 0.0) + t
                            remote_s = max(remote_s, t)
            load = InstanceLoad(batch_size=0, attn_kv_tokens=0, num_remote_queries=remote_queries,
                                prefill_tokens=prompt_tokens, prefill_attn_pairs=int(local_pairs))
            compute_s = step_time_s(model, load)
            local_attn_s = model.num_layers * local_pairs * model.prefill_attn_s_per_pair
            compute_s += max(0.0, remote_s - local_attn_s)  # waits for the slowest creditor's share
        else:
            remote_tokens: dict[int, int] = {}  # creditor -> KV tokens of this batch it reads for us
            local_tokens = 0
            for seq in seqs:
                here = rm.hosted.get(seq.req_id, 0)
                local_tokens += here * bs
                if here < len(rm.tables[seq.req_id]):
                    creditors = 0
                    for inst_id, peer in rm.peers.items():
                        share = peer.hosted.get(seq.req_id, 0) if inst_id != rm.inst_id else 0
                        if share:
                            creditors += 1
                            remote_tokens[inst_id] = remote_tokens.get(inst_id, 0) + share * bs
                    remote_queries += creditors
                    m = self.metrics[seq.req_id]
                    m.max_creditors = max(m.max_creditors, creditors)
            load = InstanceLoad(batch_size=len(seqs), attn_kv_tokens=rm.pool.num_used * bs,
                                num_remote_queries=remote_queries)
            compute_s = step_time_s(model, load)
            if remote_tokens:  # MicroAttention runs on the creditors in parallel; wait for the slowest
                slowest = max(remote_tokens.values())
                compute_s += model.num_layers * model.kv_read_s_per_token * max(0, slowest - local_tokens)
        compute_s += self.extra_s.pop(rm.inst_id, 0.0)
        move_s = model.kv_transfer_s(self.move_tokens.pop(rm.inst_id, 0))
        self.duration_s = max(compute_s, move_s)
        end_s = self.now_s + self.duration_s
        for seq in seqs:
            if not seq.output_ids and self.metrics[seq.req_id].first_token_s is None:
                self.metrics[seq.req_id].first_token_s = end_s
        self.result.step_end_s.append(end_s)
        self.result.step_tokens.append(len(seqs))
        self.result.step_inst.append(rm.inst_id)
        self.result.num_steps += 1
        return [0] * len(seqs)


class _PromptIds:
    """Stands in for a prompt's token list: only its length matters to the scheduler (O(1) memory)."""

    __slots__ = ("n",)

    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n


def build_engine(config: SimConfig, backend: SimBackend) -> Engine:
    engine_config = EngineConfig(
        num_instances=config.num_instances, blocks_per_instance=blocks_per_instance(config),
        block_size=config.block_size, max_batch_size=config.max_batch_size, pooling=config.pooling,
        max_lent_blocks=config.max_lent_blocks, move_chunk_tokens=config.move_chunk_tokens,
        gmanager_interval_steps=0, dgfm=config.dgfm, seed=config.seed)
    gm_config = GManagerConfig(block_size=config.block_size,
                               instances_per_node=max(1, 8 // (config.tp * config.pp)),
                               max_k_evals=config.max_k_evals, exclusive_roles=config.exclusive_roles,
                               num_candidates=config.num_candidates or config.num_instances)
    return Engine(engine_config, backend, gmanager_config=gm_config, perf_model=perf_model(config))


def simulate(config: SimConfig, requests, *, max_sim_s: float = float("inf"), on_event=None, on_round=None,
             prefill_elsewhere: bool = False) -> SimResult:
    """Serve `requests` (objects with req_id, arrival_s, prompt_len, output_len) on the cluster of `config`
    until every request finished, was rejected, or is stuck; `on_event(now_s)` is called after each event and
    `on_round(now_s, engine)` after each gManager round. `prefill_elsewhere`: prompts arrive with their KV
    computed by a separate prefill pool, so prefill steps take no time here (their KV is still allocated,
    spilled and placed by the engine as usual): for studying decode-phase memory behaviour at lengths whose
    prefill alone would take minutes."""
    metrics = {r.req_id: RequestMetrics(r.req_id, r.arrival_s, r.prompt_len, r.output_len) for r in requests}
    result = SimResult(list(metrics.values()))
    backend = SimBackend(config, metrics, result, prefill_elsewhere=prefill_elsewhere)
    engine = build_engine(config, backend)
    capacity = engine.config.blocks_per_instance * (config.num_instances if config.pooling else 1)
    busy = [False] * config.num_instances
    seqs: dict[int, Sequence] = {}
    queue: list = []
    order = itertools.count()
    for r in sorted(requests, key=lambda r: (r.arrival_s, r.req_id)):
        heapq.heappush(queue, (r.arrival_s, next(order), ARRIVAL, r))
    if config.pooling:
        heapq.heappush(queue, (0.0, next(order), ROUND, None))
    pending = len(requests)
    arrivals_left = len(requests)
    idle_rounds = 0
    computing = [False] * config.num_instances  # a step with work is in flight

    def wake(inst_id: int, at_s: float) -> None:
        if not busy[inst_id] and engine.instances[inst_id].has_work:
            busy[inst_id] = True
            heapq.heappush(queue, (at_s, next(order), STEP, inst_id))

    while queue and pending:
        now_s, _, kind, item = heapq.heappop(queue)
        if now_s > max_sim_s:
            break
        backend.now_s = now_s
        if kind == ARRIVAL:
            arrivals_left -= 1
            m = metrics[item.req_id]
            if num_blocks_for(item.prompt_len + item.output_len, config.block_size) > capacity:
                m.status = REJECTED
                pending -= 1
                continue
            seq = Sequence(item.req_id, _PromptIds(item.prompt_len), item.output_len)
            seqs[item.req_id] = seq
            m.inst_id = engine.add_request(seq)
            wake(m.inst_id, now_s)
        elif kind == STEP:
            inst = engine.instances[item]
            backend.duration_s = None
            for seq in inst.step(backend):
                m = metrics[seq.req_id]
                m.status, m.finish_s, m.num_preemptions = FINISHED, now_s + backend.duration_s, seq.num_preemptions
                pending -= 1
            busy[item] = computing[item] = False
            if backend.duration_s is not None:
                computing[item] = True
                busy[item] = True
                heapq.heappush(queue, (now_s + backend.duration_s, next(order), STEP, item))
            elif backend.move_tokens.get(item):
                busy[item] = True
                heapq.heappush(queue, (now_s + backend.model.kv_transfer_s(backend.move_tokens.pop(item)),
                                       next(order), STEP, item))
        else:
            engine.heartbeats()
            engine.gmanager_round()
            result.num_gmanager_rounds += 1
            if on_round is not None:
                on_round(now_s, engine)
            for i in range(config.num_instances):
                wake(i, now_s)
            idle_rounds = 0 if any(computing) or arrivals_left else idle_rounds + 1
            if idle_rounds < MAX_IDLE_ROUNDS:
                heapq.heappush(queue, (now_s + config.gmanager_interval_s, next(order), ROUND, None))
        result.end_s = max(result.end_s, now_s)
        if on_event is not None:
            on_event(now_s)
    for m in metrics.values():
        if m.status != FINISHED and m.req_id in seqs:
            m.num_preemptions = seqs[m.req_id].num_preemptions
    return result
