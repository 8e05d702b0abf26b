"""LoongServe's rules on a real backend, read through an rManager's peers (systems/loongserve/placement.py): the
prefill group is the master and the idle peers, freest first, each taking an even whole-rBlock share; a busy peer, a
peer short of its share and `max_degree` shrink it; no peer: the rManager's own admission (None). With an engine's
calibrated cost model LoongServe's analytic model sets the degree: no split where the ring costs more than it saves.
And the real backends' refusal, which no design of the catalog meets now."""
from dataclasses import dataclass, field, replace

import pytest

from reference_impl.calibration.model import CalibratedPerfModel
from reference_impl.calibration.perf_model import AnalyticPerfModel
from reference_impl.control.sequence import Sequence
from reference_impl.errors import InputError
from reference_impl.systems.catalog import DESIGNS, design
from reference_impl.systems.loongserve.placement import (PricedPeerPlacement, SequenceParallel, even_shares,
                                                         idle_peers)


@dataclass
class Peer:
    inst_id: int
    num_lendable: int
    num_homed: int = 0
    num_free: int = 0
    peers: dict = field(default_factory=dict)


def cluster(*peers: Peer) -> Peer:
    table = {p.inst_id: p for p in peers}
    for p in peers:
        p.peers = table
    return peers[0]


SEQ = Sequence(0, [1] * 40, 1)


def test_even_shares_are_whole_rblocks_the_first_taking_the_rest():
    assert even_shares(10, 3) == [4, 3, 3] and even_shares(2, 2) == [1, 1] and sum(even_shares(11, 4)) == 11


def test_the_group_is_the_master_then_the_idle_peers_freest_first():
    master = cluster(Peer(0, 6, num_free=6), Peer(1, 4), Peer(2, 9), Peer(3, 9, num_homed=1))
    assert idle_peers(master, 0) == [2, 1]  # 3 runs a request: not idle
    assert SequenceParallel()(master, SEQ, 9) == [(0, 3), (2, 3), (1, 3)]
    assert SequenceParallel(max_degree=2)(master, SEQ, 9) == [(0, 5), (2, 4)]
    assert SequenceParallel(max_degree=1)(master, SEQ, 9) is None


def test_a_group_shrinks_to_what_its_members_can_take():
    master = cluster(Peer(0, 5, num_free=5), Peer(1, 2), Peer(2, 6))
    assert SequenceParallel()(master, SEQ, 9) == [(0, 5), (2, 4)]  # 1 cannot take a third (3 rBlocks)
    assert SequenceParallel()(master, SEQ, 2) == [(0, 1), (2, 1)]  # at most one member per rBlock
    alone = cluster(Peer(0, 8, num_free=8), Peer(1, 8, num_homed=2))
    assert SequenceParallel()(alone, SEQ, 4) is None  # no idle peer: the rManager's admission


def a100_model(attention_scale: float = 1.0) -> CalibratedPerfModel:
    """LLaMA2-7B on an A100 (the shipped calibration); `attention_scale`: prefill attention that much slower, so
    that its quadratic term, which a ring divides by the degree squared, outweighs the ring's hops."""
    m = CalibratedPerfModel.for_setting(model="llama2-7b", gpu="A100-80GB-SXM")
    return replace(m, prefill_attn_s_per_pair=m.prefill_attn_s_per_pair * attention_scale)


def test_the_analytic_model_splits_only_where_the_ring_pays():
    """On an A100 a 40-token prompt's ring costs more than it saves (its non-attention layers cost the same on a
    quarter of the tokens, and the hops add): the master alone. Where attention dominates the group grows, never
    beyond the rule without a cost model."""
    master = cluster(Peer(0, 9, num_free=9), Peer(1, 9), Peer(2, 9), Peer(3, 9))
    seq = Sequence(0, [1] * 36, 1)  # 9 rBlocks of 4 tokens
    fallback = SequenceParallel(4)(master, seq, 9)
    assert len(fallback) == 4
    stock = PricedPeerPlacement(4, 192)(a100_model()).segments
    assert stock.prefill_model is not None and stock(master, seq, 9) is None
    heavy = PricedPeerPlacement(4, 192)(a100_model(2000.0)).segments(master, seq, 9)
    assert heavy is not None and 2 <= len(heavy) <= len(fallback) and sum(n for _, n in heavy) == 9


def test_without_a_calibrated_cost_model_the_fallback_rule():
    for perf_model in (None, AnalyticPerfModel()):
        placement = PricedPeerPlacement(4, 192)(perf_model)
        assert placement.segments == SequenceParallel(4) and placement.priced is None


def test_a_design_refuses_a_real_backend_it_does_not_name_in_one_line():
    """Every design of the catalog runs on both real backends now; the refusal stays for one that does not."""
    assert all(design(name).real_backends == ("local", "ray") for name in DESIGNS)
    local_only = replace(design("loongserve"), real_backends=("local",))
    with pytest.raises(InputError, match="runs on the simulator and the local backend only, not on ray"):
        local_only.real_run("ray", 2, 8, 4)
