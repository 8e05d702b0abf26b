"""An instance loop's step as a home, on the loop thread: the batch the control phase scheduled, each partner's
part of the step (a creditor holding rBlocks of a scheduled request, an instance a KV block moves from or to) sent
in one actor call, then the model with DistAttention over the data plane (step.py), or only the step's KV moves.
A home waits for its partners' calls of earlier steps here (`wait_served`), never for their loops."""
import time
from dataclasses import dataclass

import ray
import torch

from reference_impl.backends.ray.owned import Owned
from reference_impl.backends.ray.serve import PartnerWork
from reference_impl.backends.ray.dataplane import SEGMENT_KV, tag
from reference_impl.backends.sp_prefill import SegmentPlan, Segments, plan_segments
from reference_impl.backends.ray.step import DistStep, HomePlan, Pair, plan_step
from reference_impl.control.sequence import Sequence
from reference_impl.model.runner import ModelRunner
from reference_impl.model.step_inputs import TableCache, TokenArrays, token_arrays


@dataclass(slots=True)
class Batch:
    """What the control phase scheduled, for the compute phase (which reads nothing else of the control plane)."""

    seqs: list[Sequence]
    tokens: TokenArrays | None  # ids and positions fed this step, flattened; each sequence's last row
    plan: HomePlan | None
    segments: SegmentPlan | None = None  # a sequence-parallel prefill (sp_prefill.py): its members compute it


def make_batch(rm, seqs: list[Sequence], is_prefill: bool, block_size: int, cache: TableCache | None = None,
               chunked: bool = False, sequence_parallel: bool = False) -> Batch:
    """`cache`: the home's tables as arrays, kept between steps; `chunked`: the scheduler forms chunked steps;
    `sequence_parallel`: a prefill whose prompts lie in segments over instances is computed by them (sp_prefill.py)."""
    req_ids = [s.req_id for s in seqs]
    if is_prefill and sequence_parallel:
        segments = plan_segments(rm.inst_id, seqs, [rm.tables[r] for r in req_ids], block_size)
        if segments is not None:
            return Batch(seqs, None, None, segments)
    tokens = token_arrays(seqs, is_prefill, chunked)
    if cache is not None and len(cache.entries) > 2 * len(rm.tables) + 64:  # forget finished requests' tables
        cache.keep_only(rm.tables)
    return Batch(seqs, tokens, plan_step([rm.tables[r] for r in req_ids], tokens.num_tokens, tokens.num_new,
                                         block_size, is_prefill, cache, req_ids))


class Exchange(Owned):
    def __init__(self, loop):
        self.loop = loop
        self.pairs: list[Pair] = []  # KV block pairs of this step
        self.serving: list = []  # the partners' calls of the previous steps not yet seen returned
        self.num_works: dict[tuple[int, str], int] = {}  # (partner, group) -> works sent to it so far
        self.adoptions: dict[int, list] = {}  # partner -> requests moving there whole with this step (Adopt)
        self.runner = ModelRunner(loop.model, loop.device, loop.config.seed + loop.inst_id)
        self.tables = TableCache()  # this home's requests' tables as arrays (plan_step)

    def begin(self) -> None:
        """A new step: no KV block pairs yet, no peer's block read by a move."""
        self.pairs, self.adoptions = [], {}
        for i, peer in self.loop.rm.peers.items():
            if i != self.loop.inst_id:
                peer.moving_sources.clear()

    def copy_blocks(self, pairs) -> None:
        """Backend hook of `advance_moves` and DGFM: the data moves in this step's exchange with the partners."""
        me = self.loop.inst_id
        for s, d in pairs:
            self.pairs.append((s.inst_id, s.device, s.address, d.inst_id, d.device, d.address))
            if s.inst_id != me:  # read there in this step: released there once read
                self.loop.rm.peers[s.inst_id].moving_sources.add((s.device, s.address))
        self.loop.stats.num_copied_blocks += len(pairs)

    def partner_works(self, plan: HomePlan | None, segments: SegmentPlan | None = None) -> dict[int, PartnerWork]:
        loop, works = self.loop, {}
        asks = plan.asks if plan else {}
        partners = set(asks) | {p[0] for p in self.pairs} | {p[3] for p in self.pairs}
        partners |= segments.members if segments else set()
        partners |= {i for i, p in loop.rm.peers.items() if i != loop.inst_id and p.deferred_releases}
        partners |= set(self.adoptions)
        for i in sorted(partners - {loop.inst_id}):
            peer = loop.rm.peers.get(i)
            if peer is None:
                continue
            pairs = [p for p in self.pairs if i in (p[0], p[3])]
            key = (i, loop.plane.spec.address)
            number = self.num_works[key] = self.num_works.get(key, -1) + 1
            works[i] = PartnerWork(loop.inst_id, key[1], asks.get(i), pairs, peer.deferred_releases, number,
                                   self.adoptions.get(i, []), segments if segments and i in segments.members else None)
            peer.deferred_releases = []
        return works

    def run(self, batch: Batch | None, works: dict[int, PartnerWork]) -> list[int] | None:
        """This step's data plane: the partners' calls, then the model (or only the moves) here; the batch's next
        tokens (None without a batch)."""
        loop, stats = self.loop, self.loop.stats
        t0 = time.perf_counter()
        self.wait_served(all_steps=False)
        if works:
            self.serving.append([loop.handles[i].serve.remote(work) for i, work in works.items()])
        stats.num_partner_calls += len(works)
        mine = [p for p in self.pairs if loop.inst_id in (p[0], p[3])]
        step = DistStep(loop.inst_id, loop.plane, loop.caches, batch and batch.plan, {}, mine, loop.inst_id,
                        loop.model.config, loop.config.block_size, loop.model.dtype, loop.device)
        t1, cpu1 = time.perf_counter(), time.thread_time()
        tokens = None
        with torch.inference_mode():
            if batch and batch.segments:
                tokens = self.forward_segments(batch, step)
            elif batch:
                tokens = self.forward(batch, step)
            else:
                for layer in range(loop.model.config.num_layers):
                    step.attend(layer)
        stats.messaging_s += t1 - t0
        stats.wait_s += step.messaging_s
        stats.compute_s += time.perf_counter() - t1 - step.messaging_s
        stats.compute_cpu_s += time.thread_time() - cpu1
        return tokens

    def wait_served(self, all_steps: bool = True) -> None:
        """The partner calls of earlier steps are done (a failure raises here). all_steps=False leaves the last
        step's calls pending: its data plane is complete once this home has every answer, only their returns are
        left, and a partner serves this home's next work after it (serve.InTurn)."""
        t0 = time.perf_counter()
        keep = [] if all_steps or not self.serving else self.serving[-1:]
        refs = [r for step in self.serving[:len(self.serving) - len(keep)] for r in step]
        if refs:
            self.loop.wait_refs(refs)
            ray.get(refs)
        if keep:  # those seen returned already: their failures surface now
            done = ray.wait(keep[0], num_returns=len(keep[0]), timeout=0)[0]
            ray.get(done)
            keep = [[r for r in keep[0] if r not in done]]
        self.serving = [step for step in keep if step]
        self.loop.stats.reply_wait_s += time.perf_counter() - t0

    def forward_segments(self, batch: Batch, step: DistStep) -> list[int]:
        """A sequence-parallel prefill: this home's segments (its members compute theirs meanwhile), then the LM
        head on every prompt's last hidden state."""
        loop = self.loop
        part = Segments(batch.segments, loop.inst_id, loop.model, loop.caches, loop.plane, loop.config.block_size,
                        loop.device, lambda layer: tag(loop.inst_id, layer, SEGMENT_KV))
        hidden = part.gather(part.run(loop.mailbox.serve), loop.model.config.hidden_size)
        step.messaging_s += part.messaging_s
        loop.stats.num_sp_prefills += sum(d > 1 for d in batch.segments.degrees)
        loop.stats.num_sp_segments += sum(d for d in batch.segments.degrees if d > 1)
        loop.mailbox.serve()
        return self.runner.sample(batch.seqs, hidden)

    def forward(self, batch: Batch, step: DistStep) -> list[int]:
        mailbox = self.loop.mailbox

        def attend(layer, q, k, v):
            mailbox.serve()
            out = step.attend(layer, q, k, v)
            mailbox.serve()  # again before the MLP: a peer waiting on a reply from here waits less
            return out

        hidden = self.runner.forward(batch.tokens, attend)
        mailbox.serve()
        return self.runner.sample(batch.seqs, hidden, batch.tokens)
