"""The serving experiments' latency figures: e2e's re-simulated group reproduces its stored points (a changed
point is counted as differing), and the figures are drawn from a result."""
import pytest

from reference_impl.sim.config import sim_engine
from reference_impl.systems.registry import cluster
from repro.experiments.e2e_figures import plot_latency, resimulate
from repro.serving.tasks import run_point, workload


@pytest.fixture(scope="module")
def result():
    data = {"gpu": "A100-80GB-SXM", "link": "inter-node", "source": "fitted"}
    group = dict(trace_id=0, panel="10a", model="llama2-7b", num_gpus=2, num_requests=30, rates_per_s=[2.0, 8.0],
                 seeds=[0], saturation_per_s={"infinite-llm": 6.0, "vllm-m": 5.0})
    base = cluster("llama2-7b", data["gpu"], 2, link=data["link"], engine=sim_engine(seed=0))
    group["points"] = [run_point(system, base, workload(trace_id=0, num_requests=30, rate_per_s=rate, seed=0,
                                                         source="fitted"), rate, 0)
                       for rate in group["rates_per_s"] for system in ("infinite-llm", "vllm-m")]
    return {"run_id": "toy", "params": {"seed": 0, "backend": "sim"}, "data": {**data, "groups": [group]}}


def test_the_resimulated_group_equals_its_stored_points(result):
    group = result["data"]["groups"][0]
    runs, differ = resimulate(result, group)
    assert differ == 0 and set(runs) == {"infinite-llm", "vllm-m"} and set(runs["vllm-m"]) == {2.0, 8.0}
    changed = {**group, "points": [{**p, "steady_output_tok_s": p["steady_output_tok_s"] * 1.01}
                                   if p["rate_per_s"] == 8.0 and p["system"] == "vllm-m" else p
                                   for p in group["points"]]}
    assert resimulate(result, changed)[1] == 1


def test_the_figures_are_drawn(result, tmp_path):
    written = plot_latency(result, str(tmp_path))
    names = {p.rsplit("/", 1)[1] for p in written}
    assert names == {f"infinite-llm-fig10a-{kind}.{ext}" for kind in ("latency", "serving") for ext in ("png", "pdf")}
    assert all((tmp_path / n).stat().st_size > 10_000 for n in names)
