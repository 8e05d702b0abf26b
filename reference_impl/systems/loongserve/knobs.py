"""LoongServe's knobs (SimConfig.design_knobs; None: these defaults)."""
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class LoongServeKnobs:
    # the largest prefill group (None: every instance); 1: no sequence parallelism beyond the instances that hold
    # a prompt's KV (the comparison arm of the tests)
    max_degree: int | None = None
    # the link the ring's KV hops travel (a measured link's name or GB/s); None: the config's link, the one remote
    # MicroAttention uses. LoongServe's own runs keep a group in one NVLink node ("intra-node")
    ring_link: str | None = None
