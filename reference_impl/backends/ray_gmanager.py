"""The gManager actor, in a module of its own so that its process never imports torch."""
import os

import numpy as np
import ray

from reference_impl.gmanager import GManager


@ray.remote(max_concurrency=1)
class GManagerActor:
    """The gManager; `boot_id` changes when Ray restarts the actor, which tells the driver to fail over."""

    def __init__(self, config, perf_model):
        self.boot_id = os.urandom(8).hex()
        self.gm = GManager(config, perf_model)

    def call(self, name: str, *args):
        if name == "plan_dgfm":
            rng = np.random.default_rng()
            rng.bit_generator.state = args[0]
            return self.boot_id, (self.gm.plan_dgfm(rng), rng.bit_generator.state)
        if name == "reset":
            self.gm = GManager(self.gm.config, self.gm.perf_model)
            return self.boot_id, None
        if name not in ("heartbeat", "homes", "run_round", "swap_done", "recommend_creditors", "placement_map"):
            raise ValueError(f"unknown gManager call {name!r}")
        return self.boot_id, getattr(self.gm, name)(*args)
