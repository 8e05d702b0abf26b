"""Simulated points on a Ray cluster (repro/serving/executors.py RayCluster): on a local cluster of two worker
nodes (ray.cluster_utils.Cluster), one node removed while the sweep runs, the points equal those run in this
process: a lost node costs only the points it was running, which Ray runs again on the other.

`xdist_group("ray")` keeps it on the pytest-xdist worker of the other Ray tests, so two Rays never compete."""
import threading
import time
from functools import partial

import pytest

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402

from repro.experiments.e2e import GPU, _requests  # noqa: E402
from repro.serving.executors import RayCluster  # noqa: E402
from repro.serving.sweep import in_process, Sweep  # noqa: E402
from repro.serving.tasks import PointTask, RequestSpec  # noqa: E402
from reference_impl.sim.config import sim_engine  # noqa: E402
from reference_impl.systems.registry import cluster  # noqa: E402

pytestmark = pytest.mark.xdist_group("ray")

REQUESTS = 1500  # about a second a point here, so the removed node is running points when it goes


def _tasks() -> list[PointTask]:
    base = cluster("llama2-7b", GPU, 4, engine=sim_engine(seed=0))
    make = partial(_requests, 0, REQUESTS, "fitted")
    return [PointTask(system, base, RequestSpec(make, rate, seed), rate, "ray", seed)
            for rate in (4.0, 16.0) for system in ("infinite-llm", "vllm-m") for seed in (0, 1, 2)]


def _without_wall_times(points):
    return [{k: v for k, v in p.items() if k != "wall_s"} for p in points]


def test_a_node_lost_mid_sweep_costs_only_its_points_and_the_points_equal_this_processs():
    tasks = _tasks()
    here = in_process(lambda line: None)
    reference = here.run(here.points(tasks))
    local = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})  # points run on the worker nodes only
    doomed = local.add_node(num_cpus=1)
    local.add_node(num_cpus=1)
    try:
        ray.init(address=local.address, log_to_driver=False)
        sweep = Sweep(RayCluster(local.address, 1), None, lambda line: None)
        at_removal = {}

        def remove_after_two_points():
            while sweep.counts["run"] < 2:
                time.sleep(0.05)
            at_removal.update(done=sweep.counts["run"], running=sweep.in_flight)
            local.remove_node(doomed)

        remover = threading.Thread(target=remove_after_two_points, daemon=True)
        remover.start()
        start = time.monotonic()
        points = sweep.run(sweep.points(tasks))
        remover.join(timeout=30)
        # the node went while running a point (a slot each node, both taken), with points still to run
        assert at_removal["running"] == 2 and at_removal["done"] < len(tasks) - 2
        assert len(ray.nodes()) and sum(n["Alive"] for n in ray.nodes()) == 2  # the head and one worker
        assert time.monotonic() - start < 60
    finally:
        ray.shutdown()
        local.shutdown()
    assert _without_wall_times(points) == _without_wall_times(reference)
