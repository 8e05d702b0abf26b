"""repro bench scale's measurements on a small cluster: a point serves its requests per GPU and reports its own
process's CPU and memory; the gManager's round is measured on copies, leaving the run and GManager untouched."""
from dataclasses import asdict

from reference_impl.control.gmanager import GManager
from repro.benchmarks.scale import REQUESTS_PER_GPU, gmanager_table, num_requests, run_point, table
from repro.benchmarks.scale_gmanager import round_cost


def test_a_point_reports_its_requests_cpu_and_memory():
    point = run_point(8, "infinite-llm", 0.5, 8.0)
    assert point.num_requests == num_requests(8) == round(REQUESTS_PER_GPU * 8)
    assert point.num_finished == point.num_requests and point.num_events >= point.num_requests
    assert point.cpu_s > 0 and point.cpu_s_per_1k_requests == 1000 * point.cpu_s / point.num_requests
    assert point.maxrss_mib >= point.rss_before_mib > 0


def test_the_gmanager_round_is_measured_on_copies():
    heartbeat = GManager.heartbeat
    cost = round_cost(8)
    assert GManager.heartbeat is heartbeat
    assert cost.num_instances == 8 and cost.num_rounds > 0 and cost.entries > 0 and cost.heartbeats > 0
    assert cost.round_s == cost.intake_s + cost.plan_s + cost.dgfm_s and cost.heartbeat_bytes_per_s > 0
    result = {"points": [], "gmanager_rounds": [asdict(cost)]}
    assert "| 8 |" in gmanager_table(result) and table(result).count("\n") == 1


def test_the_latency_check_runs_each_seed_at_once_after_the_round_and_after_the_bound():
    from repro.benchmarks.scale_latency import latency_check, latency_table

    rounds = [{"num_instances": 8, "round_s": 0.05}, {"num_instances": 16, "round_s": 0.3}]
    result = latency_check(lambda m: None, {"gmanager_rounds": rounds}, sizes=(8, 12), seeds=(0,))
    (row,) = result["rows"]  # 12 GPUs has no measured round: skipped
    assert (row["num_gpus"], row["round_s"], row["bound_s"]) == (8, 0.05, 0.3)
    assert row["moved_blocks"] > 0 and min(row["tok_s"], row["tok_s_round"], row["tok_s_bound"]) > 0
    assert "| 8 | 50.0 |" in latency_table(result)
