"""Continuous batching on one instance: admit by free rBlocks, prefill or decode, preempt by recompute.

Infinite-llm 5.2 on the instance's side: a creditor short of room reclaims what it lent (kv_moves.py) before
anything is preempted; a debtor spends room freed by retiring requests on a larger batch or on bringing
offloaded blocks home, whichever the perf model says gains more (retrieval.py, given by the Engine); without a
model (the Ray actors' schedulers) waiting requests come first and retrieval takes the room they leave.
"""
from collections import deque

from reference_impl.control.rmanager import Recommend, RManager
from reference_impl.control.sequence import Sequence, Status, num_blocks_for

STALE = -1  # min_waiting_blocks is to be recomputed


class Scheduler:
    def __init__(self, rmanager: RManager, block_size: int, max_batch_size: int, recommend: Recommend | None,
                 *, chunked_prefill_tokens: int | None = None, retrieval=None, placement_fits=None,
                 placement_segments=None):
        """`recommend` is the gManager's creditor hint; None turns KV pooling off (the vLLM-M policy).
        `chunked_prefill_tokens`: each step decodes every running request and prefills prompt chunks in the
        tokens left of this budget (vLLM's chunked prefill); None: a step prefills whole prompts or decodes.
        `retrieval`, `placement_fits`: below."""
        self.rm = rmanager
        self.changes = rmanager.changes  # queue changes count in `changes.queues` and name this instance
        self.inst_id = rmanager.inst_id
        self.chunked_prefill_tokens = chunked_prefill_tokens
        self.block_size = block_size
        self.max_batch_size = max_batch_size
        self.recommend = recommend
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.num_retrievable = 0  # local blocks freed by retiring requests, to spend on retrieval
        # room -> blocks to bring home, by the perf model (Engine.retrieval_blocks); None: waiting requests first
        self.retrieval = retrieval
        # (request, rBlocks) -> whether the design's placement can take it now (a design that places KV its own way,
        # through `recommend`, asks first instead of allocating and undoing); None: the rManager's admission alone
        self.placement_fits = placement_fits
        # (request, rBlocks) -> the runs (inst_id, rBlocks) a design splits a prompt into (control/placement.py
        # `segments`), or None: the rManager's admission
        self.placement_segments = placement_segments
        self._head_blocked = False
        self.num_waiting_blocks = 0  # rBlocks the waiting requests need at admission
        self._min_waiting_blocks: int | None = None  # kept as requests come, STALE when the smallest leaves
        self._head_need = 0  # head_blocks
        # the largest running batch so far: a run whose peak stayed below a batch cap is the run under any cap
        # above its peak (the cap is read only as `running < max_batch_size`)
        self.peak_running = 0

    def add(self, seq: Sequence) -> None:
        self.waiting.append(seq)
        need = self._added(seq)
        if len(self.waiting) == 1:
            self._head_need = need

    def add_first(self, seq: Sequence) -> None:
        self.waiting.appendleft(seq)
        self._head_need = self._added(seq)

    @property
    def is_head_blocked(self) -> bool:
        """The first waiting request could not be admitted at the last schedule."""
        return self._head_blocked

    @is_head_blocked.setter
    def is_head_blocked(self, blocked: bool) -> None:
        if blocked != self._head_blocked:
            self._head_blocked = blocked
            self._queue_changed()

    def _queue_changed(self) -> None:
        self.changes.queues += 1
        self.changes.changed_queues.add(self.inst_id)

    def _added(self, seq: Sequence) -> int:
        self._queue_changed()
        need = num_blocks_for(seq.num_tokens, self.block_size)
        self.num_waiting_blocks += need
        if self._min_waiting_blocks is None or (self._min_waiting_blocks != STALE and need < self._min_waiting_blocks):
            self._min_waiting_blocks = need
        return need

    def take_waiting(self, index: int = 0) -> Sequence:
        seq = self.waiting[index]
        del self.waiting[index]
        self._queue_changed()
        need = num_blocks_for(seq.num_tokens, self.block_size)
        self.num_waiting_blocks -= need
        if not self.waiting:
            self._min_waiting_blocks = None
        elif need == self._min_waiting_blocks:
            self._min_waiting_blocks = STALE
        if index == 0 and self.waiting:
            self._head_need = num_blocks_for(self.waiting[0].num_tokens, self.block_size)
        return seq

    def remove_waiting(self, req_id: int) -> None:
        for index, seq in enumerate(self.waiting):
            if seq.req_id == req_id:
                self.take_waiting(index)
                return

    @property
    def min_waiting_blocks(self) -> int | None:
        """The fewest rBlocks a waiting request needs at admission (None: nothing waits). A waiting request's
        length does not change, so this is recomputed only after the smallest one leaves the queue."""
        if self._min_waiting_blocks == STALE:
            self._min_waiting_blocks = min(num_blocks_for(seq.num_tokens, self.block_size) for seq in self.waiting)
        return self._min_waiting_blocks

    def mean_waiting_blocks(self) -> float:
        if not self.waiting:
            return 0.0
        return self.num_waiting_blocks / len(self.waiting)

    def schedule(self) -> tuple[list[Sequence], bool]:
        """Prefill the waiting requests that fit, else one decode step for every running request (chunked:
        decode the running requests and prefill prompt chunks in one step)."""
        # (most steps: nothing waits, so nothing to admit or to mark blocked)
        admitted = self._admit() if self.waiting or self._head_blocked else []
        if self.chunked_prefill_tokens is not None:
            for seq in admitted:
                seq.prefill_left = seq.num_tokens
            self._run(admitted)
            self._may_retrieve()
            return self._decode([s for s in self.running if not s.prefill_left]) + self._prefill_chunks(), False
        if admitted:
            self._run(admitted)
            return admitted, True
        self._may_retrieve()
        return self._decode(list(self.running)), False

    def _prefill_chunks(self) -> list[Sequence]:
        budget = max(self.block_size, self.chunked_prefill_tokens - sum(not s.prefill_left for s in self.running))
        chunks = []
        for seq in self.running:
            seq.chunk_tokens = min(seq.prefill_left, budget)
            if seq.chunk_tokens:
                seq.prefill_left -= seq.chunk_tokens
                budget -= seq.chunk_tokens
                chunks.append(seq)
        return chunks

    def _decode(self, seqs: list[Sequence]) -> list[Sequence]:
        """Grow the tables of `seqs` for one more token each; those that got room."""
        scheduled, num_stalled, num_leaving = [], 0, None
        tables, bs, running = self.rm.tables, self.block_size, Status.RUNNING
        for seq in seqs:
            if seq.status is not running:  # preempted for an earlier one
                continue
            table, num_tokens = tables[seq.req_id], seq.num_prompt_tokens + len(seq.output_ids)  # (a hot path)
            while len(table) * bs < num_tokens:
                if self.rm.append_block(seq.req_id, self.recommend) is not None:
                    continue
                if num_leaving is None:
                    num_leaving = self.rm.reclaim_lent(self._num_short()) if self.recommend is not None else 0
                if num_stalled < num_leaving:
                    num_stalled += 1  # lent blocks are on their way out: wait for them, lose no work
                    break
                # nowhere can take what this instance lent: recompute the newest request, as vLLM does (it
                # has the least generated work to redo, and its rBlocks free room for the older ones)
                victim = self.running[-1]
                self.preempt(victim)
                if victim is seq:
                    break
            else:  # (no break: it has room and still runs)
                scheduled.append(seq)
        return scheduled

    def _num_short(self) -> int:
        """rBlocks the running requests need before this decode step."""
        return sum(max(0, num_blocks_for(s.num_tokens, self.block_size) - len(self.rm.tables[s.req_id]))
                   for s in self.running)

    def _admit(self) -> list[Sequence]:
        admitted, blocked = [], False
        while self.waiting and len(self.running) + len(admitted) < self.max_batch_size:
            seq = self.waiting[0]
            need = num_blocks_for(seq.num_tokens, self.block_size)
            fits = self.placement_fits is None or self.placement_fits(seq, need)
            runs = self.placement_segments(seq, need) if fits and self.placement_segments is not None else None
            if not fits or not (self.rm.alloc_runs(seq.req_id, runs) if runs
                                else self.rm.alloc_prompt(seq.req_id, need, self.recommend)):
                blocked = True
                if self._lends_and_may_not_borrow and need <= self.rm.pool.num_capacity:
                    # a creditor may not borrow: it calls back room it lent when that makes the request fit here
                    # (a bigger one needs borrowing, so a borrower takes it: Engine.fill_idle / redispatch)
                    self.rm.reclaim_lent(need - self.rm.num_free)
                break
            seq.status = Status.RUNNING
            admitted.append(self.take_waiting())
        self.is_head_blocked = blocked  # (set once: a blocked head that stays blocked is no queue change)
        return admitted

    @property
    def _lends_and_may_not_borrow(self) -> bool:
        return self.recommend is not None and self.rm.exclusive_roles and self.rm.is_creditor

    @property
    def head_blocks(self) -> int:
        """rBlocks the first waiting request needs at admission (there must be one; kept as the head changes: a
        waiting request's length does not change)."""
        return self._head_need

    @property
    def waits_for_others(self) -> bool:
        """A step here can change nothing until another instance acts: nothing runs, and the first waiting request
        was refused and is larger than this instance, while it is a creditor that may not borrow (so it neither
        admits it nor calls room back for it: _admit)."""
        if self.running or not self.waiting or not self._head_blocked or self.rm.moves:
            return False
        return self.head_blocks > self.rm.pool.num_capacity and self._lends_and_may_not_borrow

    def _may_retrieve(self) -> None:
        if not self.rm.num_borrowed or self.recommend is None:  # (most steps: nothing to bring home)
            self.num_retrievable = 0
            return
        if self.retrieval is None:
            room = min(self.num_retrievable, self.rm.num_free - self.num_waiting_blocks)
        else:  # decided once per retirement: what the model keeps is room for a larger batch
            room = self.retrieval(min(self.num_retrievable, self.rm.num_free))
            self.num_retrievable = room
        if room > 0:
            self.num_retrievable -= self.rm.retrieve(room)

    def _run(self, seqs: list[Sequence]) -> None:
        if seqs:
            self.running.extend(seqs)
            self.peak_running = max(self.peak_running, len(self.running))
            self._queue_changed()

    def adopt(self, seq: Sequence) -> None:
        """A running request moved here whole from another instance (control/request_move.py) joins the batch."""
        self._run([seq])

    def remove_running(self, seq: Sequence) -> None:
        self.running.remove(seq)
        self._queue_changed()

    def abort(self, req_id: int) -> Sequence | None:
        """Drop request `req_id` (a client went away) between steps: out of the queue, or out of the batch with
        every rBlock it holds here or on other instances, its pending moves and reservations freed. The request,
        or None when it is not on this instance."""
        for seq in self.running:
            if seq.req_id == req_id:
                self.remove_running(seq)
                self.rm.free_request(req_id)
                seq.status = Status.FINISHED
                return seq
        for index, seq in enumerate(self.waiting):
            if seq.req_id == req_id:
                seq.status = Status.FINISHED
                if index == 0:
                    self.is_head_blocked = False  # (as for a request handed to another instance)
                return self.take_waiting(index)
        return None

    def preempt(self, seq: Sequence) -> None:
        self.remove_running(seq)
        self.rm.free_request(seq.req_id)
        seq.status = Status.WAITING
        seq.prefill_left = seq.chunk_tokens = 0
        seq.num_preemptions += 1
        self.add_first(seq)

    def postprocess(self, seqs: list[Sequence], token_ids: list[int]) -> list[Sequence]:
        finished = []
        for seq, token_id in zip(seqs, token_ids):
            seq.chunk_tokens = 0
            if seq.prefill_left:
                continue  # the prompt is not all prefilled yet: no token
            seq.output_ids.append(token_id)
            if seq.is_finished:
                seq.placement = dict(self.rm.holders(seq.req_id))
                self.num_retrievable += seq.placement.get(self.rm.inst_id, 0)
                seq.status = Status.FINISHED
                self.rm.free_request(seq.req_id)
                self.remove_running(seq)
                finished.append(seq)
        return finished
