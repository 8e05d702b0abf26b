"""gManager: the global request placement map, the debt ledger, creditor hints and the periodic round.

Loosely coherent (infinite-llm 6.1, distkv-llm 4.4): it only knows what heartbeats told it. A round first
recalls the blocks of debtors that have free space again, then runs Algorithm 1; DGFM is planned on the
same map (dgfm.py). Its decisions are `MoveKVCache` messages for the requests' home rManagers.
"""
from collections import defaultdict

import numpy as np

from reference_impl.control.algorithm1 import InstanceView, plan_moves
from reference_impl.control.dgfm import cancellable_debts, graph_nodes, plan_swap
from reference_impl.control.engine_config import EngineConfig, GManagerConfig
from reference_impl.control.memo import Memo
from reference_impl.calibration.perf_model import AnalyticPerfModel, PerfModel
from reference_impl.control.protocol import Heartbeat, InstanceStatus, MoveKVCache, RequestPlacementEntry, Swap


__all__ = ["GManager", "GManagerConfig"]


class GManager:
    def __init__(self, config: EngineConfig | None = None, perf_model: PerfModel | None = None):
        """`config`: the engine's (its block size and roles rule, and its `gmanager` knobs)."""
        self.config = config or EngineConfig()
        self.perf_model = perf_model or AnalyticPerfModel()
        self.entries: dict[tuple[int, int], RequestPlacementEntry] = {}  # changed by heartbeats only
        self._keys_by_inst: dict[int, set[tuple[int, int]]] = defaultdict(set)  # entries' keys, per instance
        self.status: dict[int, InstanceStatus] = {}
        self.frozen: set[int] = set()
        self._k_memo: dict = {}  # Algorithm 1's k search, across rounds (plan_moves)
        # every change of the map, a status or the frozen set bumps `version`; a round and a DGFM plan on an
        # unchanged version are what they were (both are functions of those alone)
        self.version = 0
        self._round = Memo()  # run_round's moves, per version
        self._acyclic = Memo()  # the debt-graph nodes of a DGFM plan that found no cycle, per version

    def heartbeat(self, hb: Heartbeat) -> None:
        if hb.full or hb.entries or hb.removed_req_ids or self.status.get(hb.inst_id) != hb.status:
            self.version += 1
        keys = self._keys_by_inst[hb.inst_id]
        if hb.full:  # (a failover's: every instance sends one, so not a scan of every entry each)
            for key in keys:
                del self.entries[key]
            keys.clear()
        for entry in hb.entries:
            key = (entry.req_id, entry.inst_id)
            self.entries[key] = entry
            self._keys_by_inst[entry.inst_id].add(key)
        for req_id in hb.removed_req_ids:
            self.entries.pop((req_id, hb.inst_id), None)
            keys.discard((req_id, hb.inst_id))
        self.status[hb.inst_id] = hb.status

    # --- derived views
    def placement_map(self) -> dict[int, tuple[RequestPlacementEntry, ...]]:
        by_req = defaultdict(list)
        for entry in self.entries.values():
            by_req[entry.req_id].append(entry)
        return {r: tuple(sorted(es, key=lambda e: e.inst_id)) for r, es in sorted(by_req.items())}

    def homes(self) -> dict[int, int]:
        return {e.req_id: e.inst_id for e in self.entries.values() if e.local}

    def ledger(self) -> dict[int, dict[int, int]]:
        """Global debt ledger: creditor -> {debtor: rBlocks lent}, from the placement map."""
        homes = self.homes()
        ledger: dict[int, dict[int, int]] = defaultdict(lambda: defaultdict(int))
        for e in self.entries.values():
            if not e.local and e.num_blocks and e.req_id in homes:
                ledger[e.inst_id][homes[e.req_id]] += e.num_blocks
        return {c: dict(d) for c, d in ledger.items()}

    def views(self) -> dict[int, InstanceView]:
        homes = self.homes()
        views = {i: InstanceView(i, s.num_capacity_blocks, s.num_free_blocks, s.num_lendable_blocks,
                                 s.batch_size, num_waiting=s.num_waiting, mean_waiting_blocks=s.mean_waiting_blocks)
                 for i, s in self.status.items()}
        for e in self.entries.values():
            home = homes.get(e.req_id)
            if e.inst_id in views:
                views[e.inst_id].kv_blocks += e.num_blocks
            if home is None or home not in views:
                continue
            hv = views[home]
            hv.total_blocks_by_req[e.req_id] = hv.total_blocks_by_req.get(e.req_id, 0) + e.num_blocks
            if e.local:
                hv.local_blocks_by_req[e.req_id] = e.num_blocks
            elif e.num_blocks:
                hv.num_remote_queries += 1
                hv.borrowed_blocks += e.num_blocks
                hv.creditors_by_req.setdefault(e.req_id, set()).add(e.inst_id)
                if e.inst_id in views:
                    views[e.inst_id].lent_blocks += e.num_blocks
        return views

    # --- decisions
    def recommend_creditors(self, debtor_inst: int, num_blocks: int) -> list[int]:
        """Up to `num_candidates` creditors: same node first, then most lendable space; never a debtor when
        roles are exclusive."""
        borrowers = {d for debts in self.ledger().values() for d in debts} if self.config.exclusive_roles else set()
        knobs = self.config.gmanager
        node = debtor_inst // knobs.instances_per_node
        candidates = [s for i, s in self.status.items()
                      if i != debtor_inst and i not in borrowers and s.num_lendable_blocks > 0]
        candidates.sort(key=lambda s: (s.inst_id // knobs.instances_per_node != node,
                                       s.num_lendable_blocks < num_blocks, -s.num_lendable_blocks, s.inst_id))
        return [s.inst_id for s in candidates[: knobs.num_candidates]]

    def plan_recalls(self, views: dict[int, InstanceView]) -> list[MoveKVCache]:
        """Debtors with free space take their own blocks back first (infinite-llm 5.2)."""
        moves = []
        for view in views.values():
            room = view.free_blocks
            for req_id, total in sorted(view.total_blocks_by_req.items()):
                remote = total - view.local_blocks_by_req.get(req_id, 0)
                if room <= 0 or not remote or req_id in self.frozen:
                    continue
                n = min(room, remote)
                moves.append(MoveKVCache(req_id, n, view.inst_id))
                room -= n
        return moves

    def run_round(self) -> list[MoveKVCache]:
        """One periodic round on the current map: recalls, then Algorithm 1."""
        return list(self._round.get(self.version, self._plan_round))

    def _plan_round(self) -> list[MoveKVCache]:
        views = self.views()
        recalls = self.plan_recalls(views)
        homes = self.homes()
        recalled = {homes[m.req_id] for m in recalls}
        knobs = self.config.gmanager
        return recalls + plan_moves(views, self.perf_model, self.config.block_size, knobs.beta_thres,
                                    knobs.util_thres, frozen=self.frozen, skip=recalled,
                                    max_k_evals=knobs.max_k_evals, k_memo=self._k_memo)

    def plan_dgfm(self, rng: np.random.Generator) -> Swap | None:
        """A DGFM swap on one debt cycle, its requests frozen until `swap_done`."""
        if self._acyclic.holds(self.version):
            if self._acyclic.value:
                rng.permutation(self._acyclic.value)  # the search's draw: the stream stays as if it ran
            return None
        placements = defaultdict(dict)
        for e in self.entries.values():
            if e.num_blocks and e.req_id not in self.frozen:
                placements[e.req_id][e.inst_id] = e.num_blocks
        homes = self.homes()
        graph = cancellable_debts(placements, homes, self.config.gmanager.dgfm_min_blocks)
        swap = plan_swap(graph, placements, homes, rng)
        if swap is None:
            self._acyclic.set(self.version, len(graph_nodes(graph)))
        else:
            self.frozen |= {r for r, *_ in swap.recalls}
            self.version += 1
        return swap

    def swap_done(self, swap: Swap) -> None:
        self.frozen -= {r for r, *_ in swap.recalls}
        self.version += 1
