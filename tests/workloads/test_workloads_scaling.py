"""The fixed scaling rule of real runs at CPU scale (workloads/scaling.py)."""
import numpy as np
import pytest

from workloads.generate import generate
from workloads.scaling import scale_factor, scale_requests


def test_the_quantile_length_fills_an_instance_whatever_the_sample():
    factor = scale_factor(trace_id=1, instance_tokens=256, quantile=0.9)
    for n, seed in ((40, 0), (400, 3), (4000, 7)):  # the factor is the trace's, not the sample's
        assert scale_factor(trace_id=1, instance_tokens=256, quantile=0.9) == factor
        scaled = scale_requests(generate(trace_id=1, num_requests=n, rate_per_s=1.0, seed=seed), factor, 384)
        lengths = np.array([r.prompt_len + r.output_len for r in scaled])
        assert lengths.max() <= 384 and min(min(r.prompt_len, r.output_len) for r in scaled) >= 1
        if n >= 4000:  # about 10% outgrow one instance
            assert 0.07 <= np.mean(lengths > 256) <= 0.13


def test_capped_requests_keep_their_prompt_output_proportion():
    (request,) = generate(trace_id=3, num_requests=1, rate_per_s=1.0, seed=0)
    (capped,) = scale_requests([request], 1.0, 100)
    assert capped.prompt_len + capped.output_len == 100
    assert capped.prompt_len / 100 == pytest.approx(request.prompt_len / (request.prompt_len + request.output_len),
                                                    abs=0.01)
    with pytest.raises(ValueError, match="quantile"):
        scale_factor(trace_id=1, instance_tokens=256, quantile=1.0)
