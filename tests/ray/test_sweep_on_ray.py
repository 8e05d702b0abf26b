"""Simulated points on a Ray cluster (repro/serving/executors.py RayCluster): on a local cluster of two worker
nodes (ray.cluster_utils.Cluster), one node removed while the sweep runs, the points equal those run in this
process: a lost node costs only the points it was running, which Ray runs again on the other. With $RAY_ADDRESS
set and no --address, a run's points go to that cluster, joined the engine backend's way (init_ray, the packages
shipped as py_modules).

`xdist_group("ray")` keeps it on the pytest-xdist worker of the other Ray tests, so two Rays never compete."""
import sys
import threading
import time
from dataclasses import replace
from functools import partial

import pytest

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402

from repro.experiments.e2e import GPU, _requests  # noqa: E402
from repro.serving.executors import RayCluster  # noqa: E402
from repro.framework.base import RunParams  # noqa: E402
from repro.serving.sweep import in_process, open_sweep, Sweep  # noqa: E402
from repro.serving.tasks import PointTask, RequestSpec, run_point  # noqa: E402
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


def on_node(task) -> dict:
    """The point, and the id of the Ray node it ran on."""
    point = run_point(task.system, task.base, task.requests, task.rate_per_s, task.seed)
    return {**point, "node": ray.get_runtime_context().get_node_id()}


def test_with_ray_address_set_and_no_address_the_points_run_on_that_cluster(monkeypatch):
    tasks = [replace(t, runner=on_node) for t in _tasks()[:4]]
    here = in_process(lambda line: None)
    reference = here.run(here.points([replace(t, runner=None) for t in tasks]))
    local = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    worker = local.add_node(num_cpus=1)
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # on_node: this module is not on the nodes
    address = local.address
    monkeypatch.setenv("RAY_ADDRESS", address)
    lines = []
    try:
        with open_sweep(RunParams(extra={"workers": "1", "store": "off"}), lines.append, "env") as sweep:
            points = sweep.run(sweep.points(tasks))
        assert not ray.is_initialized()  # the sweep joined Ray itself, and left
    finally:
        ray.shutdown()
        local.shutdown()
    assert f"points on Ray at {address} (1 CPUs)" in lines[0]
    assert {p.pop("node") for p in points} == {worker.node_id}
    assert _without_wall_times(points) == _without_wall_times(reference)
