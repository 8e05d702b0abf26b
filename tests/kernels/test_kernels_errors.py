"""Bad input raises ValueError with a one-line message, never a Triton error or a silent wrong answer."""
import pytest
import torch

from reference_impl.kernels.equivalence import make_case
from reference_impl.kernels import dist_attention, micro_attention, scale_reduce


def good():
    case = make_case([20, 5], 8, 2, 64, 8, torch.float32, seed=1)
    table, lens = case.whole()
    return dict(q=case.q, k_cache=case.k_cache, v_cache=case.v_cache, block_table=table, seq_lens=lens)


def with_(**changes):
    args = good()
    args.update({k: v(args) if callable(v) else v for k, v in changes.items()})
    return args


BAD_INPUTS = {
    "q not 3-D": (with_(q=lambda a: a["q"][0]), "q must be"),
    "v shape differs": (with_(v_cache=lambda a: a["v_cache"][:, :, :1]), "v_cache shape"),
    "dtype mismatch": (with_(k_cache=lambda a: a["k_cache"].half(), v_cache=lambda a: a["v_cache"].half()),
                       "must match q dtype"),
    "unsupported dtype": (with_(q=lambda a: a["q"].double()), "not supported"),
    "Hq not a multiple of Hkv": (with_(q=lambda a: a["q"][:, :7]), "multiple of num_kv_heads"),
    "head_dim differs": (with_(q=lambda a: a["q"][:, :, :32]), "head_dim"),
    "seq_lens beyond block table": (with_(seq_lens=lambda a: a["seq_lens"] + 100), "exceeds its block table"),
    "negative length": (with_(seq_lens=lambda a: a["seq_lens"] - 6), "must be >= 0"),
    "block id out of range": (with_(block_table=lambda a: a["block_table"] + 1000), r"outside \[0,"),
    "negative block id": (with_(block_table=lambda a: a["block_table"].clamp(max=-1)), r"outside \[0,"),
    "float block table": (with_(block_table=lambda a: a["block_table"].float()), "integer tensors"),
    "block table rows": (with_(block_table=lambda a: a["block_table"][:1]), "block_table must be"),
    "seq_lens length": (with_(seq_lens=lambda a: a["seq_lens"][:1]), "seq_lens must be"),
}


@pytest.mark.parametrize("backend", ["torch", "triton"])
@pytest.mark.parametrize("name", sorted(BAD_INPUTS))
def test_bad_micro_attention_input(name, backend):
    args, message = BAD_INPUTS[name]
    with pytest.raises(ValueError, match=message) as info:
        micro_attention(**args, backend=backend)
    assert "\n" not in str(info.value)


def test_bad_scale_and_backend():
    with pytest.raises(ValueError, match="scale must be"):
        micro_attention(**good(), scale=-1.0)
    with pytest.raises(ValueError, match="unknown backend"):
        micro_attention(**good(), backend="cuda-magic")


def test_bad_scale_reduce_input():
    outs, lses = torch.zeros(2, 3, 4, 64), torch.zeros(2, 3, 4)
    with pytest.raises(ValueError, match="lses must be"):
        scale_reduce(outs, lses[:, :2])
    with pytest.raises(ValueError, match="float32"):
        scale_reduce(outs, lses.half())
    with pytest.raises(ValueError, match="at least one part"):
        scale_reduce(outs[:0], lses[:0])
    with pytest.raises(ValueError, match="at least one part"):
        dist_attention(outs[0], [])
