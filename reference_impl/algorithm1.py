"""Algorithm 1 of infinite-llm (cluster-level DistAttention scheduling), on the gManager's view.

Debtors: batch <= beta_thres, ascending batch. Creditors: memory utilisation <= U_thres, ascending. For
each debtor, its longest request r and Block_max = r's blocks on the debtor; for each creditor in order,
the k in [0, Block_max] maximising the two instances' modelled throughput (Eq. 5-7); stop at k = 0.

The modelled throughput of an instance admits waiting requests into its free blocks (that is how freed
space raises a debtor's batch, and how lent space lowers a creditor's, infinite-llm 5.2).
"""
from dataclasses import dataclass, field, replace

from reference_impl.perf_model import InstanceLoad, PerfModel, throughput_tok_s
from reference_impl.protocol import MoveKVCache


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
    if view.mean_waiting_blocks <= 0:
        return view.num_waiting
    return min(view.num_waiting, int(max(0, view.free_blocks) // view.mean_waiting_blocks))


def instance_load(view: InstanceView, block_size: int) -> InstanceLoad:
    extra = projected_admissions(view)
    kv_tokens = (view.kv_blocks + extra * view.mean_waiting_blocks) * block_size
    return InstanceLoad(batch_size=view.batch_size + extra, attn_kv_tokens=int(kv_tokens),
                        num_remote_queries=view.num_remote_queries)


def instance_tps(model: PerfModel, view: InstanceView, block_size: int) -> float:
    return throughput_tok_s(model, instance_load(view, block_size))


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
               max_k_evals: int | None = None) -> list[MoveKVCache]:
    """Algorithm 1 over `views` (updated in place as moves are planned); returns the moves.
    `max_k_evals`: see `best_block_count` (None: every k, as the paper)."""
    debtors = sorted((v for v in views.values()
                      if 0 < v.batch_size <= beta_thres and v.lent_blocks == 0 and v.inst_id not in skip),
                     key=lambda v: (v.batch_size, v.inst_id))
    debtor_ids = {v.inst_id for v in debtors}
    creditor_ids = {v.inst_id for v in views.values()
                    if v.util <= util_thres and v.borrowed_blocks == 0 and v.inst_id not in debtor_ids}
    moves = []
    for debtor_id in [v.inst_id for v in debtors]:
        candidates = {r: n for r, n in views[debtor_id].local_blocks_by_req.items() if r not in frozen}
        if not candidates:
            continue
        req_id = max(candidates, key=lambda r: (views[debtor_id].total_blocks_by_req.get(r, 0), -r))
        block_max = candidates[req_id]
        visited = set()
        while block_max > 0:
            order = sorted((views[i] for i in creditor_ids - visited), key=lambda v: (v.util, v.inst_id))
            if not order:
                break
            creditor = order[0]
            visited.add(creditor.inst_id)
            debtor = views[debtor_id]

            def pair_tps(k: int) -> float:
                d, c = after_move(debtor, creditor, req_id, k)
                return instance_tps(model, d, block_size) + instance_tps(model, c, block_size)

            best_k = best_block_count(pair_tps, min(block_max, creditor.lendable_blocks), max_k_evals)
            if best_k <= 0:
                break
            moves.append(MoveKVCache(req_id, best_k, creditor.inst_id))
            views[debtor_id], views[creditor.inst_id] = after_move(debtor, creditor, req_id, best_k)
            if views[creditor.inst_id].util > util_thres:
                creditor_ids.discard(creditor.inst_id)
            block_max -= best_k
    return moves
