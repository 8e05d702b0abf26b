"""Live-migration comparator: cost arithmetic on hand-computed cases, the experiment's result and claims."""
import pytest

from reference_impl.errors import InputError
from repro.experiments.migration.model import LinearStep, MigrationComparator, MigrationSetting

LLAMA2_7B_BYTES = 2 * (32 * (4 * 4096 * 4096 + 3 * 4096 * 11008 + 2 * 4096) + 2 * 32000 * 4096)


@pytest.fixture(scope="module")
def comp():
    return MigrationComparator(MigrationSetting(move_tokens_per_step=0))


def test_linear_step_sum_by_hand():
    step = LinearStep(fixed_s=1.0, per_token_s=0.1)
    assert step.total_s(10, 3) == pytest.approx(3 * 1.0 + 0.1 * (10 + 11 + 12))
    assert step.total_s(10, 0) == 0


def test_provisioning_is_weights_over_bandwidths(comp):
    assert LLAMA2_7B_BYTES == 13_476_823_040
    assert comp.provision_s() == pytest.approx(LLAMA2_7B_BYTES / 1e9 + LLAMA2_7B_BYTES / 2 / 2e9)
    slow = MigrationComparator(MigrationSetting(object_store_gb_s=0.1, load_gb_s=1.0))
    assert slow.provision_s() == pytest.approx(LLAMA2_7B_BYTES / 0.1e9 + LLAMA2_7B_BYTES / 2 / 1e9)


def test_no_migration_when_the_request_fits(comp):
    prompt = comp.capacity - 100
    inf, vllm, llumnix = comp.compare(prompt, 100)
    assert inf.total_s == vllm.total_s == llumnix.total_s
    assert inf.communication_s == vllm.migration_s == llumnix.migration_s == 0
    assert inf.total_s == pytest.approx(comp.prefill_s(prompt) + comp.step_one.total_s(prompt, 100))


def test_three_steps_past_capacity_by_hand(comp):
    cap, m = comp.capacity, comp.one
    prompt, output = cap - 10, 13  # 10 steps on one GPU, 3 past the capacity
    before = comp.prefill_s(prompt) + comp.step_one.total_s(prompt, 10)
    per_step_comm = m.num_layers * (m.link.time_s(3 * m.query_bytes) + m.link.time_s(m.result_bytes))
    inf = comp.infinite_llm(prompt, output)
    assert inf.compute_s == pytest.approx(before + 3 * comp.step_one.at(cap))
    assert inf.communication_s == pytest.approx(3 * per_step_comm)
    vllm = comp.vllm_migrate(prompt, output)
    kv = min(m.link.time_s(cap * m.memory.kv_bytes_per_token_per_gpu / 2), comp.prefill_s(cap, comp.two))
    assert vllm.migration_s == pytest.approx(comp.provision_s() + kv)
    assert vllm.compute_s == pytest.approx(before + comp.step_two.total_s(cap, 3))
    llumnix = comp.llumnix_precopy(prompt, output)
    assert llumnix.compute_s == pytest.approx(vllm.compute_s)
    assert 0 <= llumnix.migration_s <= vllm.migration_s


def test_llumnix_stall_is_provisioning_not_hidden_by_the_lead_time():
    comp = MigrationComparator(MigrationSetting(trigger_fraction=0.5))
    cap = comp.capacity
    llumnix = comp.llumnix_precopy(cap - 1, 5)  # past the trigger already: lead = prefill + one step
    lead = comp.prefill_s(cap - 1) + comp.step_one.at(cap - 1)
    downtime = llumnix.migration_s - max(0.0, comp.provision_s() - lead)
    assert 0 <= downtime <= comp.step_one.at(cap)


def test_moving_kv_to_the_creditor_shortens_decode():
    overflow = MigrationComparator(MigrationSetting(move_tokens_per_step=0))
    moving = MigrationComparator(MigrationSetting(move_tokens_per_step=16))
    prompt = overflow.capacity - 1000
    assert moving.infinite_llm(prompt, 5000).compute_s < overflow.infinite_llm(prompt, 5000).compute_s


@pytest.mark.parametrize("kwargs", [dict(object_store_gb_s=0), dict(load_gb_s=-1), dict(trigger_fraction=1.5),
                                    dict(move_tokens_per_step=-1)])
def test_bad_settings(kwargs):
    with pytest.raises(InputError):
        MigrationSetting(**kwargs)


def test_bad_lengths(comp):
    with pytest.raises(InputError, match="does not fit"):
        comp.compare(comp.capacity + 1, 10)
    with pytest.raises(InputError):
        comp.compare(100, 0)


def test_experiment_result_claims_and_bad_param(tmp_path):
    from repro.framework.base import RunParams
    from repro.framework.registry import get_experiment
    from repro.results import load_results, run_and_save

    exp = get_experiment("migration")
    run_and_save(exp, RunParams(), tmp_path, log=lambda m: None)
    results = load_results(tmp_path, exp)
    data = results[0]["data"]
    assert all(r["prompt"] + r["output"] > data["capacity_tokens"] for r in data["rows"])  # aligned: all migrate
    rows = exp.claims(results)
    assert [r.claim_id for r in rows] == ["live-migration"] * len(rows) and len(rows) == 7
    assert rows[0].reproduced == data["capacity_tokens"]
    assert exp.plot(results, str(tmp_path / "fig"))[0].endswith("distkv-llm-fig9.png")
    with pytest.raises(InputError, match="unknown --param"):
        run_and_save(exp, RunParams(extra={"nope": "1"}), tmp_path, force=True, log=lambda m: None)
    with pytest.raises(InputError, match="load_gb_s=.fast. is not valid"):
        run_and_save(exp, RunParams(extra={"load_gb_s": "fast"}), tmp_path, force=True, log=lambda m: None)
