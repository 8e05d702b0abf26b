"""The gManager's own round as the cluster grows (`repro bench scale --gmanager`; docs/simulator.md).

Trace 0 on N LLaMA2-7B instances of one A100 at RATE_PER_GPU_S requests/s per GPU, simulated until LOADED_S,
the rounds after WARM_S measured (the cluster filled). For each measured round:
- heartbeat intake: the CPU time of GManager.heartbeat over the round's heartbeats as the run sends them (only the
  instances that changed, each with its changed entries), and their bytes on the wire (pickled, as Ray sends
  them); and the intake of every instance's full state on a fresh gManager (a failover's, the upper bound);
- plan: recalls and Algorithm 1 (GManager.run_round) on a fresh gManager holding the round's map (no memo);
- DGFM: its plan (plan_dgfm) on that same fresh gManager.
The simulation itself is not changed: the fresh gManagers are copies, and the timed intake wraps the real one.
"""
import pickle
import statistics
import time
from dataclasses import asdict, dataclass

import numpy as np

from reference_impl.control.gmanager import GManager
from reference_impl.control.protocol import Heartbeat
from reference_impl.systems.run import simulate
from repro.benchmarks.scale_cluster import base_config
from repro.experiments.e2e import _requests

GMANAGER_SIZES = (32, 128, 512, 1024, 4096, 8192)
RATE_PER_GPU_S = 2.0
WARM_S, LOADED_S = 4.0, 8.0  # rounds at WARM_S < t <= LOADED_S are measured; the run stops at LOADED_S


@dataclass(frozen=True, slots=True)
class RoundCost:
    num_instances: int
    num_rounds: int  # measured
    entries: float  # placement entries the gManager holds (mean over the measured rounds)
    heartbeats: float  # sent per round (mean)
    intake_s: float  # CPU s per round (median), the run's heartbeats
    full_intake_s: float  # every instance's full state on a fresh gManager (median)
    plan_s: float  # recalls + Algorithm 1 (median)
    dgfm_s: float  # DGFM's plan (median)
    round_s: float  # intake_s + plan_s + dgfm_s
    heartbeat_bytes_per_s: float  # pickled, over the round interval (mean)


class _Watch:
    """Times the real gManager's heartbeat intake per round, and measures fresh copies of it after each round."""

    def __init__(self, interval_s: float):
        self.interval_s = interval_s
        self.original = GManager.heartbeat
        self.intake_s = self.bytes = self.count = 0
        self.rows: list[dict] = []

    def heartbeat(self, gm, hb) -> None:
        """GManager.heartbeat, timed (installed on the class while the run lasts)."""
        self.bytes += len(pickle.dumps(hb, protocol=5))
        self.count += 1
        start = time.process_time()
        self.original(gm, hb)
        self.intake_s += time.process_time() - start

    def on_round(self, now_s: float, engine) -> None:
        intake_s, sent, count = self.intake_s, self.bytes, self.count
        self.intake_s = self.bytes = self.count = 0
        if not WARM_S < now_s <= LOADED_S:
            return
        gm = engine.gmanager
        full = [Heartbeat(i.status(), tuple(i.rm.entries()), (), True) for i in engine.instances]
        fresh = GManager(gm.config, gm.perf_model)
        start = time.process_time()
        for hb in full:
            self.original(fresh, hb)
        full_intake_s = time.process_time() - start
        fresh.frozen = set(gm.frozen)
        start = time.process_time()
        fresh.run_round()
        plan_s = time.process_time() - start
        start = time.process_time()
        fresh.plan_dgfm(np.random.default_rng(0))
        dgfm_s = time.process_time() - start
        self.rows.append(dict(entries=len(gm.entries), heartbeats=count, intake_s=intake_s,
                              full_intake_s=full_intake_s, plan_s=plan_s, dgfm_s=dgfm_s,
                              bytes_per_s=sent / self.interval_s))


def round_cost(num_gpus: int) -> RoundCost:
    config = base_config(num_gpus)
    requests = _requests(0, int(RATE_PER_GPU_S * num_gpus * LOADED_S * 1.5), "fitted", RATE_PER_GPU_S * num_gpus, 0)
    watch = _Watch(config.gmanager_interval_s)
    GManager.heartbeat = lambda gm, hb: watch.heartbeat(gm, hb)
    try:
        simulate(config, requests, max_sim_s=LOADED_S, on_round=watch.on_round)
    finally:
        GManager.heartbeat = watch.original
    rows = watch.rows

    def median(key):
        return statistics.median(r[key] for r in rows)

    intake, plan, dgfm = median("intake_s"), median("plan_s"), median("dgfm_s")
    return RoundCost(config.engine.num_instances, len(rows), statistics.mean(r["entries"] for r in rows),
                     statistics.mean(r["heartbeats"] for r in rows), intake, median("full_intake_s"), plan, dgfm,
                     intake + plan + dgfm, statistics.mean(r["bytes_per_s"] for r in rows))


def bench_gmanager(log, max_gpus: int) -> list[dict]:
    out = []
    for num_gpus in (g for g in GMANAGER_SIZES if g <= max_gpus):
        cost = round_cost(num_gpus)
        log(f"gManager round, {cost.num_instances} instances, {cost.entries:.0f} entries: {1e3 * cost.round_s:.1f} "
            f"ms CPU (intake {1e3 * cost.intake_s:.1f}, plan {1e3 * cost.plan_s:.1f}, DGFM {1e3 * cost.dgfm_s:.1f}), "
            f"heartbeats {cost.heartbeat_bytes_per_s / 1e6:.2f} MB/s")
        out.append(asdict(cost))
    return out
