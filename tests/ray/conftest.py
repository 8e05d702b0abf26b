"""The Ray backend's tests: one private 2-CPU Ray a module, started the project's way (`init_ray`: workers at this
process's priority; at Ray's default nice 15 the gManager's restart took 60 s beside busy test workers). Each
module marks itself `xdist_group("ray")`, so its cases stay on one pytest-xdist worker (`--dist loadgroup`) and two
Rays never compete for the two CPUs."""
import pytest


@pytest.fixture(scope="module")
def local_ray():
    ray = pytest.importorskip("ray")
    from reference_impl.backends.ray import RayConfig, init_ray

    assert init_ray(RayConfig(num_cpus=2))
    yield
    ray.shutdown()
