"""A design's run on the simulator, for callers that hold a config: its design looked up once (catalog.py) and handed
to the Simulator, which imports no design."""
from reference_impl.serving.records import ServingRun
from reference_impl.sim.config import SimConfig
from reference_impl.sim.simulator import Simulator, simulate as simulate_with
from reference_impl.systems.catalog import design


def simulator(config: SimConfig, requests, **kwargs) -> Simulator:
    """The Simulator of `config`'s cluster run by the design it names (kwargs: Simulator's)."""
    return Simulator(config, requests, design=design(config.design), **kwargs)


def simulate(config: SimConfig, requests, **kwargs) -> ServingRun:
    """sim.simulator.simulate with the design `config` names (kwargs: its)."""
    return simulate_with(config, requests, design=design(config.design), **kwargs)
