import numpy as np
import pytest

from workloads import datasets
from workloads.generate import generate
from workloads.paper_tables import DATASETS
from workloads.stats import context_lens


def test_table2_numbering():
    assert sorted(DATASETS) == list(range(1, 19))
    assert [DATASETS[i].long_ratio for i in (1, 7, 13)] == [0.01, 0.10, 0.30]
    assert (DATASETS[9].model, DATASETS[9].num_gpus, DATASETS[9].long_range) == ("LLaMA2-70B", 8, (300000, 600000))
    assert (DATASETS[18].num_gpus, DATASETS[18].normal_range) == (32, (1, 950000))


@pytest.mark.parametrize("dataset_id", sorted(DATASETS))
def test_dataset_long_ratio_and_ranges(dataset_id):
    row = DATASETS[dataset_id]
    for seed in (0, 1):
        requests = generate(dataset_id=dataset_id, num_requests=row.num_requests, rate_per_s=1.0, seed=seed)
        ctx = context_lens(requests)
        labels = np.array([r.source.endswith("-long") for r in requests])
        assert abs(labels.mean() - row.long_ratio) <= 0.02
        assert np.array_equal(labels, datasets.is_long(dataset_id, ctx))
        normal, long = ctx[~labels], ctx[labels]
        assert normal.min() >= row.normal_range[0] and normal.max() <= row.normal_range[1]
        assert long.min() >= row.long_range[0] and long.max() <= row.long_range[1]
        assert all(r.prompt_len >= 1 and r.output_len >= 1 for r in requests)


def test_dataset_seeds():
    a = generate(dataset_id=13, num_requests=100, rate_per_s=1.0, seed=4)
    assert a == generate(dataset_id=13, num_requests=100, rate_per_s=1.0, seed=4)
    assert a != generate(dataset_id=13, num_requests=100, rate_per_s=1.0, seed=5)


def test_copied_tables_match_the_shared_claims():
    import json
    from pathlib import Path

    from workloads.paper_tables import TRACES

    claims_path = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "paper" / "claims.json"
    if not claims_path.is_file():
        pytest.skip("shared/data/paper/claims.json is not beside this checkout")
    claims = json.loads(claims_path.read_text())
    assert [list(r) for r in claims["traces"]["rows"]] == [
        [t.trace_id, t.group, t.min_len, t.max_len, t.avg_len, t.sd_len, t.origin] for t in TRACES.values()]
    ratios = [r / 100 for r in claims["datasets"]["long_ratios_percent"]]
    for model, gpus, ids, normal, long in claims["datasets"]["rows"]:
        for dataset_id, ratio in zip(ids, ratios):
            row = DATASETS[dataset_id]
            assert (row.model, row.num_gpus, list(row.normal_range), list(row.long_range), row.long_ratio) == (
                model, gpus, normal, long, ratio)
