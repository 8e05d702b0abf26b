"""An instance loop's link to the gManager: heartbeats at most every `interval_s` (every step's changes, or the full
placement list after a restart), and what the replies bring back (the gManager's view of the peers' lendable room
and running requests, its creditor candidates for this instance). Runs on the loop thread."""
import time

import ray
from ray.exceptions import RayError

from reference_impl.backends.ray.owned import Owned


class GManagerLink(Owned):
    def __init__(self, gmanager, instance, stats, interval_s: float):
        """gmanager: the gManager actor's handle; instance: this loop's Instance; stats: its LoopStats."""
        self.gmanager, self.instance, self.rm, self.stats = gmanager, instance, instance.rm, stats
        self.interval_s, self.next_s = interval_s, 0.0
        self.future = None  # the heartbeat call not yet seen answered
        self.boot = None  # the gManager incarnation of the last reply
        self.full = True  # the next heartbeat carries the full placement list
        self.hint: list[int] = []  # the gManager's creditor candidates for this instance, from its last reply

    def recommend(self, debtor_inst: int, num_blocks: int) -> list[int]:
        """The candidates of the last reply still with room in its view (a stale hint is refused by the creditor
        and tried again after the next reply)."""
        peers = self.rm.peers
        return [i for i in self.hint if i in peers and i != self.rm.inst_id and peers[i].num_lendable > 0]

    def beat(self) -> None:
        """Send this step's heartbeat; a gManager that restarted (new boot id, or the call failed) gets the full
        placement list next (the papers' failover rule)."""
        if self.future is not None and ray.wait([self.future], timeout=0)[0]:
            try:
                self.on_reply(ray.get(self.future))
            except RayError:  # lost with the old incarnation: the new one gets everything
                self.full = True
            self.future = None
        if self.future is None and (self.full or time.perf_counter() >= self.next_s):
            self.next_s = time.perf_counter() + self.interval_s
            full, self.full = self.full, False
            self.stats.num_full_heartbeats += full
            self.future = self.gmanager.heartbeat.remote(self.rm.heartbeat(self.instance.status(), full=full))

    def sync(self, wait_ref) -> None:
        """A heartbeat of everything changed, its reply awaited with `wait_ref` (the loop's, serving mail)."""
        if self.future is not None:  # the last heartbeat lands first: the gManager keeps the newest
            wait_ref(self.future)
            self.future = None
        self.on_reply(wait_ref(self.gmanager.heartbeat.remote(self.rm.heartbeat(self.instance.status()))))

    def on_reply(self, reply) -> None:
        boot, view, self.hint = reply
        if boot != self.boot and self.boot is not None:
            self.full = True
            self.stats.num_gmanager_restarts += 1
        self.boot = boot
        for i, peer in self.rm.peers.items():
            if i != self.rm.inst_id:
                peer.view_lendable, peer.num_homed = view.get(i, (0, 0))

    def swap_done(self, swap) -> None:
        self.gmanager.swap_done.remote(swap)
