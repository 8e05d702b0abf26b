"""Algorithm 1 of infinite-llm (cluster-level DistAttention scheduling), on the gManager's view.

Debtors: batch <= beta_thres, ascending batch. Creditors: memory utilisation <= U_thres, ascending. For
each debtor, its longest request r and Block_max = r's blocks on the debtor; for each creditor in order,
the k in [0, Block_max] maximising the two instances' modelled throughput (Eq. 5-7); stop at k = 0.

The modelled throughput of an instance admits waiting requests into its free blocks (that is how freed
space raises a debtor's batch, and how lent space lowers a creditor's, infinite-llm 5.2).
"""
import heapq
from dataclasses import dataclass, field, replace

from reference_impl.calibration.perf_model import InstanceLoad, PerfModel, throughput_tok_s
from reference_impl.control.protocol import MoveKVCache

K_MEMO_SIZE = 1 << 16  # plan_moves' k_memo is cleared when it holds this many pairs


@dataclass(slots=True)
class InstanceView:
    inst_id: int
    capacity_blocks: int
    free_blocks: int
    lendable_blocks: int
    batch_size: int
    kv_blocks: int = 0  # blocks physically here: own requests' and hosted ones
    num_waiting: int = 0
    mean_waiting_blocks: float = 0.0
    num_remote_queries: int = 0  # (home request, creditor) pairs of requests homed here
    lent_blocks: int = 0
    borrowed_blocks: int = 0
    local_blocks_by_req: dict[int, int] = field(default_factory=dict)  # home requests: blocks here
    total_blocks_by_req: dict[int, int] = field(default_factory=dict)  # home requests: blocks everywhere
    creditors_by_req: dict[int, set] = field(default_factory=dict)

    @property
    def util(self) -> float:
        return (self.capacity_blocks - self.free_blocks) / self.capacity_blocks if self.capacity_blocks else 1.0


def projected_admissions(view: InstanceView) -> int:
    return _admissions(view.free_blocks, view.num_waiting, view.mean_waiting_blocks)


def _admissions(free_blocks: int, num_waiting: int, mean_waiting_blocks: float) -> int:
    if mean_waiting_blocks <= 0:
        return num_waiting
    return min(num_waiting, int(max(0, free_blocks) // mean_waiting_blocks))


def _load(batch_size, kv_blocks, free_blocks, num_waiting, mean_waiting_blocks, num_remote_queries,
          block_size) -> InstanceLoad:
    extra = _admissions(free_blocks, num_waiting, mean_waiting_blocks)
    kv_tokens = (kv_blocks + extra * mean_waiting_blocks) * block_size
    return InstanceLoad(batch_size=batch_size + extra, attn_kv_tokens=int(kv_tokens),
                        num_remote_queries=num_remote_queries)


def instance_load(view: InstanceView, block_size: int) -> InstanceLoad:
    return _load(view.batch_size, view.kv_blocks, view.free_blocks, view.num_waiting, view.mean_waiting_blocks,
                 view.num_remote_queries, block_size)


def instance_tps(model: PerfModel, view: InstanceView, block_size: int) -> float:
    return throughput_tok_s(model, instance_load(view, block_size))


def _pair_key(debtor: InstanceView, creditor: InstanceView, req_id: int) -> tuple:
    """What the pair's modelled throughput after a move of k blocks depends on (after_move, instance_load)."""
    new_pair = creditor.inst_id not in debtor.creditors_by_req.get(req_id, ())
    return (debtor.batch_size, debtor.kv_blocks, debtor.free_blocks, debtor.num_waiting,
            debtor.mean_waiting_blocks, debtor.num_remote_queries + new_pair, debtor.num_remote_queries,
            creditor.batch_size, creditor.kv_blocks, creditor.free_blocks, creditor.num_waiting,
            creditor.mean_waiting_blocks, creditor.num_remote_queries)


def _pair_tps_after(model: PerfModel, key: tuple, block_size: int, k: int) -> float:
    """instance_tps of both views of after_move(debtor, creditor, req_id, k), from `_pair_key`'s fields."""
    d_batch, d_kv, d_free, d_wait, d_mean, d_rq_moved, d_rq, c_batch, c_kv, c_free, c_wait, c_mean, c_rq = key
    d = _load(d_batch, d_kv - k, d_free + k, d_wait, d_mean, d_rq_moved if k else d_rq, block_size)
    c = _load(c_batch, c_kv + k, c_free - k, c_wait, c_mean, c_rq, block_size)
    return throughput_tok_s(model, d) + throughput_tok_s(model, c)


def cluster_tps(model: PerfModel, views, block_size: int) -> float:
    """Eq. 7: the sum of the instances' modelled throughput."""
    return sum(instance_tps(model, v, block_size) for v in views)


def after_move(debtor: InstanceView, creditor: InstanceView, req_id: int, k: int):
    """The two views once k blocks of req_id went from debtor to creditor."""
    if k == 0:
        return debtor, creditor
    new_pair = creditor.inst_id not in debtor.creditors_by_req.get(req_id, set())
    d = replace(debtor, free_blocks=debtor.free_blocks + k, kv_blocks=debtor.kv_blocks - k,
                num_remote_queries=debtor.num_remote_queries + new_pair,
                borrowed_blocks=debtor.borrowed_blocks + k,
                local_blocks_by_req={**debtor.local_blocks_by_req,
                                     req_id: debtor.local_blocks_by_req[req_id] - k},
                creditors_by_req={**debtor.creditors_by_req,
                                  req_id: debtor.creditors_by_req.get(req_id, set()) | {creditor.inst_id}})
    c = replace(creditor, free_blocks=creditor.free_blocks - k, lendable_blocks=creditor.lendable_blocks - k,
                kv_blocks=creditor.kv_blocks + k, lent_blocks=creditor.lent_blocks + k)
    return d, c


def best_block_count(tps, limit: int, max_evals: int | None = None) -> int:
    """The smallest k in [0, limit] maximising tps(k). With `max_evals`, a grid of that many points, then a
    grid again within one step of the best, until the step is 1 (exact when tps is unimodal in k; the
    simulator uses it so a round costs O(instances), not O(blocks))."""
    memo: dict[int, float] = {}

    def value(k: int) -> float:
        if k not in memo:
            memo[k] = tps(k)
        return memo[k]

    lo, hi = 0, limit
    if max_evals is not None:
        points = max(3, max_evals)
        while hi - lo + 1 > points:
            step = -(-(hi - lo) // (points - 1))
            best = max(sorted(set(range(lo, hi + 1, step)) | {hi}), key=lambda k: (value(k), -k))
            lo, hi = max(lo, best - step + 1), min(hi, best + step - 1)
    return max(sorted(set(range(lo, hi + 1)) | set(memo)), key=lambda k: (value(k), -k))


def plan_moves(views: dict[int, InstanceView], model: PerfModel, block_size: int, beta_thres: int,
               util_thres: float, *, frozen=frozenset(), skip=frozenset(),
               max_k_evals: int | None = None, k_memo: dict | None = None) -> list[MoveKVCache]:
    """Algorithm 1 over `views` (updated in place as moves are planned); returns the moves.
    `max_k_evals`: see `best_block_count` (None: every k, as the paper). `k_memo`: a dict kept across calls
    with the same model, block size and max_k_evals; a pair in the same state gets the k found before."""
    debtors = sorted((v for v in views.values()
                      if 0 < v.batch_size <= beta_thres and v.lent_blocks == 0 and v.inst_id not in skip),
                     key=lambda v: (v.batch_size, v.inst_id))
    debtor_ids = {v.inst_id for v in debtors}
    creditor_ids = {v.inst_id for v in views.values()
                    if v.util <= util_thres and v.borrowed_blocks == 0 and v.inst_id not in debtor_ids}
    # the creditors by (util, id): a debtor takes them in that order, each once; a creditor lent to goes back in
    # at its new util once that debtor is done (the only view whose util changes is the one lent to)
    by_util = [(views[i].util, i) for i in creditor_ids]
    heapq.heapify(by_util)
    moves = []
    for debtor_id in [v.inst_id for v in debtors]:
        candidates = {r: n for r, n in views[debtor_id].local_blocks_by_req.items() if r not in frozen}
        if not candidates:
            continue
        req_id = max(candidates, key=lambda r: (views[debtor_id].total_blocks_by_req.get(r, 0), -r))
        block_max = candidates[req_id]
        visited = []
        while block_max > 0:
            if not by_util:
                break
            creditor = views[heapq.heappop(by_util)[1]]
            visited.append(creditor.inst_id)
            debtor = views[debtor_id]
            key = _pair_key(debtor, creditor, req_id)
            limit = min(block_max, creditor.lendable_blocks)
            best_k = None if k_memo is None else k_memo.get((key, limit))
            if best_k is None:
                best_k = best_block_count(lambda k: _pair_tps_after(model, key, block_size, k), limit, max_k_evals)
                if k_memo is not None:
                    if len(k_memo) >= K_MEMO_SIZE:
                        k_memo.clear()
                    k_memo[(key, limit)] = best_k
            if best_k <= 0:
                break
            moves.append(MoveKVCache(req_id, best_k, creditor.inst_id))
            views[debtor_id], views[creditor.inst_id] = after_move(debtor, creditor, req_id, best_k)
            if views[creditor.inst_id].util > util_thres:
                creditor_ids.discard(creditor.inst_id)
            block_max -= best_k
        for i in visited:
            if i in creditor_ids:
                heapq.heappush(by_util, (views[i].util, i))
    return moves
