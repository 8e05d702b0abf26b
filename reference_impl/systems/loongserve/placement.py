"""LoongServe's KV placement on an engine's instances: the rules (control/placement.py's Placement) its Engine is
built with. The simulator's policy reads its engine (`LoongServePlacement`: an instance in a prefill group counts as
busy); a real backend's instances read the cluster through their rManager's peers (`peer_placement`, a value handed
to every instance: the local engine's rManagers, on Ray the gManager's last view of each peer). One rule for both:

- At admission a prompt's rBlocks fill its master, then the idle instances (no running request, in no prefill
  group), the freest first (the creditor hint, `recommend`); only a prompt larger than its master spills further
  (RManager's rule). LoongServe's prefill group is drawn from the instances its iteration has free
  (`_schedule_new_req_list` sorts them by used tokens) and its plan fills one member after another
  (`_get_batch_prefill_migration_plan`); the ring leaves each token's KV where the plan puts it. Placing on a
  decoding instance would force it into the ring, which LoongServe does only when its model says the prefill gains
  more than the decode batch loses (the simulator's backend adds such members by that rule). The Scheduler asks
  `fits` first, so a prompt this placement cannot take waits without allocating.
- Sequence-parallel prefill (real backends, `SequenceParallel`): a prompt's group is the master and as many idle
  instances as LoongServe's analytic model chooses (analytic.py `choose_group` on the PrefillModel fitted to the
  engine's cost model: the simulator's own choice, one copy); its rBlocks are split evenly over the group, one run
  per member in token order, which the backend prefills with each member computing its own run's tokens (the
  simulator prices the ring instead: backend.py). An engine with no calibrated cost model keeps a fallback: every
  idle instance that can take an even share.
- Scale-up: a decoding request whose master is full gets its next rBlock where its KV tail is, else on an idle
  instance, else on the one with the most room (RManager.append_block with the same hint); old KV never moves.
- No rebalancing: a debtor brings no borrowed block home when room frees (the Scheduler's `retrieval`).
"""
from collections.abc import Callable
from dataclasses import dataclass

from reference_impl.calibration.model import CalibratedPerfModel
from reference_impl.control.placement import Placement
from reference_impl.control.sequence import Sequence
from reference_impl.systems.loongserve.analytic import Candidate, PrefillModel, choose_group, prefill_model_for


def _no_retrieval(room: int) -> int:
    return 0


def freest_first(rooms: list[tuple[int, int]]) -> list[int]:
    """The ids of (inst_id, room) pairs, the most room first (ties: the lower id)."""
    return [i for i, _ in sorted(rooms, key=lambda r: (-r[1], r[0]))]


def fits_over(rm, num_blocks: int, lendable_idle: int) -> bool:
    """Whether master `rm` and idle instances lending `lendable_idle` rBlocks can take `num_blocks` now (all
    instances, for a prompt larger than the master: RManager.alloc_prompt's rule)."""
    if num_blocks <= rm.num_free:
        return True
    if num_blocks > rm.pool.num_capacity:
        return rm.can_admit(num_blocks, True)
    return num_blocks <= rm.num_free + lendable_idle


class LoongServePlacement:
    """On the instances of the engine `engine_of()` gives once it is built (the rules are given to its constructor);
    `in_prefill(inst_id)`: whether that instance is in a prefill group now."""

    def __init__(self, engine_of: Callable, in_prefill=lambda inst_id: False):
        self.engine_of, self.in_prefill = engine_of, in_prefill

    @property
    def engine(self):
        return self.engine_of()

    def rules(self) -> Placement:
        """What the Engine's constructor takes: the creditor hint, no retrieval, the admission check."""
        return Placement(recommend=self.recommend, retrieval=_no_retrieval, fits=self.fits)

    def recommend(self, rm, debtor: int, num_blocks: int = 0) -> list[int]:
        return self.idle_others(debtor)

    def idle_others(self, debtor: int) -> list[int]:
        """Where `debtor`'s request places the rBlocks its own room cannot take: the idle instances, freest first."""
        return freest_first([(inst.inst_id, inst.rm.num_free) for inst in self.engine.instances
                             if inst.inst_id != debtor and not inst.scheduler.running
                             and not self.in_prefill(inst.inst_id)])

    def fits(self, rm, seq: Sequence, num_blocks: int) -> bool:
        rms = self.engine.rmanagers
        return fits_over(rm, num_blocks, sum(rms[i].num_lendable for i in self.idle_others(rm.inst_id)))


def idle_peers(rm, debtor: int, num_blocks: int = 0) -> list[int]:
    """Placement.recommend on a real backend: the peers of `rm` with no request running (`num_homed`), the most
    lendable room first."""
    return freest_first([(i, p.num_lendable) for i, p in rm.peers.items() if i != debtor and not p.num_homed])


def fits_idle_peers(rm, seq: Sequence, num_blocks: int) -> bool:
    peers = rm.peers
    return fits_over(rm, num_blocks, sum(peers[i].num_lendable for i in idle_peers(rm, rm.inst_id)))


def even_shares(num_blocks: int, k: int) -> list[int]:
    """`num_blocks` rBlocks over `k` members in token order, as even as whole rBlocks allow (the first get one more)."""
    q, r = divmod(num_blocks, k)
    return [q + (j < r) for j in range(k)]


@dataclass(frozen=True, slots=True)
class SequenceParallel:
    """Placement.segments on a real backend: a prompt's prefill group is its master and the idle peers (the freest
    first, as `idle_peers`), at most `max_degree` (None: every instance) and, with `prefill_model`, as many as
    LoongServe's analytic model chooses for the prompt (`choose_group`, the simulator's choice: an idle peer is a
    candidate with no wait and no decode batch, so the model decides the degree); then as many of them as can each
    take an even share of its rBlocks (at least one each). Its rBlocks split into one run per member in token order,
    the master's first. None (the master alone: the rManager's admission) when no peer joins. Without
    `prefill_model` (an engine with no calibrated cost model) every idle peer that can take a share joins."""
    max_degree: int | None = None
    prefill_model: PrefillModel | None = None

    def __call__(self, rm, seq: Sequence, num_blocks: int) -> list[tuple[int, int]] | None:
        peers = rm.peers
        idle = idle_peers(rm, rm.inst_id)
        k = min(num_blocks, 1 + len(idle), self.max_degree or len(peers))
        if k > 1 and self.prefill_model is not None:
            k = min(k, len(choose_group(self.prefill_model, [seq.num_tokens], [Candidate(rm.inst_id, 0.0, 0.0)],
                                        [Candidate(i, 0.0, 0.0) for i in idle])))
        for k in range(k, 1, -1):
            members = [rm.inst_id, *idle[:k - 1]]
            shares = even_shares(num_blocks, k)
            if shares[0] <= rm.num_free and all(n <= peers[m].num_lendable for m, n in zip(members[1:], shares[1:])):
                return list(zip(members, shares))
        return None


def _rules(segments: SequenceParallel, priced=None) -> Placement:
    return Placement(recommend=idle_peers, retrieval=_no_retrieval, fits=fits_idle_peers, segments=segments,
                     priced=priced)


@dataclass(frozen=True, slots=True)
class PricedPeerPlacement:
    """Placement.priced: the rules with the PrefillModel fitted to the engine's cost model (as the simulator fits
    it: degrees 1 .. `max_degree`, batches up to `max_tokens`), or the fallback rule where the engine has no
    calibrated cost model (None, or the gManager's analytic roofline, which cannot price a ring)."""
    max_degree: int
    max_tokens: int

    def __call__(self, perf_model) -> Placement:
        if not isinstance(perf_model, CalibratedPerfModel):
            return _rules(SequenceParallel(self.max_degree))
        return _rules(SequenceParallel(self.max_degree, prefill_model_for(perf_model, self.max_degree,
                                                                          self.max_tokens)))


def peer_placement(max_degree: int, max_tokens: int) -> Placement:
    """The rules on a real backend of up to `max_tokens` KV tokens, prefill groups of at most `max_degree`
    instances, read through an instance's rManager and its peers (the local engine's rManagers; on Ray the
    gManager's last view of each peer): module functions and values, so that the Ray backend can hand the placement
    to every instance actor and equal placements are one engine. The engine prices it with its cost model
    (`PricedPeerPlacement`) as it is built."""
    return _rules(SequenceParallel(max_degree), PricedPeerPlacement(max_degree, max_tokens))
