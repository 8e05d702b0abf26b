"""The gManager actor, in a module of its own so that its process never imports torch.

It takes heartbeats (its replies carry its view of the instances and its creditor hint), and runs its rounds
on its own timer: each round's `move_kvcache` goes to the request's home instance actor, a DGFM swap to the
first live instance, which carries it out while the instances it touches hold (loop.py). A restart by Ray
re-runs `__init__`: a new `boot_id`, an empty map; the instances notice the new boot id in their heartbeat
replies and send their full state (failover).
"""
import os
import threading
import time

import numpy as np
import ray

from reference_impl.control.gmanager import GManager

DELIVERY_TIMEOUT_S = 5.0  # a dead instance never acknowledges; failover is the heartbeats' job


@ray.remote(max_concurrency=4)
class GManagerActor:
    def __init__(self, config, perf_model, instances: dict, interval_s: float, use_dgfm: bool, seed: int):
        """config: the engine's EngineConfig (the gManager reads its block size, roles rule and `gmanager` knobs);
        instances: inst_id -> instance actor handle; interval_s: seconds between rounds (0: on request only)."""
        self.boot_id = os.urandom(8).hex()
        self.gm = GManager(config, perf_model)
        self.instances = dict(instances)
        self.use_dgfm = use_dgfm
        self.rng = np.random.default_rng(seed)
        self.lock = threading.Lock()
        self.num_rounds = 0
        if interval_s > 0:
            threading.Thread(target=self._timer, args=(interval_s,), daemon=True).start()

    def _timer(self, interval_s: float) -> None:
        while True:
            time.sleep(interval_s)
            self.run_round()

    def heartbeat(self, hb) -> tuple[str, dict[int, tuple[int, int]], list[int]]:
        """Take a heartbeat; the reply is this incarnation's boot id, its view of every instance (lendable room,
        running requests) and its creditor candidates for the sender (what the sender's admission and creditor
        choice read about its peers until the next reply)."""
        with self.lock:
            if hb.inst_id in self.instances:
                self.gm.heartbeat(hb)
            view = {i: (s.num_lendable_blocks, s.batch_size) for i, s in self.gm.status.items()}
            hint = self.gm.recommend_creditors(hb.inst_id, 1)
        return self.boot_id, view, hint

    def recommend_creditors(self, debtor_inst: int, num_blocks: int) -> list[int]:
        with self.lock:
            return self.gm.recommend_creditors(debtor_inst, num_blocks)

    def run_round(self) -> list:
        """One round on the current map; returns the `move_kvcache` messages sent."""
        with self.lock:
            homes = self.gm.homes()
            moves = [m for m in self.gm.run_round() if homes.get(m.req_id) in self.instances]
            swap = self.gm.plan_dgfm(self.rng) if self.use_dgfm else None
            self.num_rounds += 1
        sent = [self.instances[homes[m.req_id]].move_kvcache.remote(m) for m in moves]
        if swap is not None:
            sent.append(self.instances[min(self.instances)].swap.remote(swap))
        # the round ends with its instructions in the inboxes: a late swap would meet requests that finished since
        ray.wait(sent, num_returns=len(sent), timeout=DELIVERY_TIMEOUT_S)
        return moves

    def swap_done(self, swap) -> None:
        with self.lock:
            self.gm.swap_done(swap)

    def drop_instances(self, dead: list[int]) -> None:
        """Forget dead instances: an empty map, rebuilt from the survivors' full heartbeats."""
        with self.lock:
            for d in dead:
                self.instances.pop(d, None)
            self.gm = GManager(self.gm.config, self.gm.perf_model)

    def placement_map(self) -> dict:
        with self.lock:
            return self.gm.placement_map()

    def get_boot_id(self) -> str:
        return self.boot_id
