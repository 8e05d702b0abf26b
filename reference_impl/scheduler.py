"""Continuous batching on one instance: admit by free rBlocks, prefill or decode, preempt by recompute."""
from collections import deque

from reference_impl.rmanager import Recommend, RManager
from reference_impl.sequence import Sequence, Status, num_blocks_for


class Scheduler:
    def __init__(self, rmanager: RManager, block_size: int, max_batch_size: int, recommend: Recommend | None):
        """`recommend` is the gManager's creditor hint; None turns KV pooling off (the vLLM-M policy)."""
        self.rm = rmanager
        self.block_size = block_size
        self.max_batch_size = max_batch_size
        self.recommend = recommend
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []

    def add(self, seq: Sequence) -> None:
        self.waiting.append(seq)

    def mean_waiting_blocks(self) -> float:
        if not self.waiting:
            return 0.0
        return sum(num_blocks_for(s.num_tokens, self.block_size) for s in self.waiting) / len(self.waiting)

    def schedule(self) -> tuple[list[Sequence], bool]:
        """Prefill the waiting requests that fit, else one decode step for every running request."""
        admitted = []
        while self.waiting and len(self.running) + len(admitted) < self.max_batch_size:
            seq = self.waiting[0]
            if not self.rm.alloc_prompt(seq.req_id, num_blocks_for(seq.num_tokens, self.block_size), self.recommend):
                break
            seq.status = Status.RUNNING
            admitted.append(self.waiting.popleft())
        if admitted:
            self.running.extend(admitted)
            return admitted, True
        scheduled = []
        for seq in list(self.running):
            if seq not in self.running:  # preempted for an earlier one
                continue
            while len(self.rm.tables[seq.req_id]) * self.block_size < seq.num_tokens:
                if self.rm.append_block(seq.req_id, self.recommend) is None:
                    victim = self.running[-1]
                    self.preempt(victim)
                    if victim is seq:
                        break
            if seq in self.running:
                scheduled.append(seq)
        return scheduled, False

    def preempt(self, seq: Sequence) -> None:
        self.running.remove(seq)
        self.rm.free_request(seq.req_id)
        seq.status = Status.WAITING
        seq.num_preemptions += 1
        self.waiting.appendleft(seq)

    def postprocess(self, seqs: list[Sequence], token_ids: list[int]) -> list[Sequence]:
        finished = []
        for seq, token_id in zip(seqs, token_ids):
            seq.output_ids.append(token_id)
            if seq.is_finished:
                seq.placement = {}
                for block in self.rm.tables[seq.req_id]:
                    seq.placement[block.inst_id] = seq.placement.get(block.inst_id, 0) + 1
                seq.status = Status.FINISHED
                self.rm.free_request(seq.req_id)
                self.running.remove(seq)
                finished.append(seq)
        return finished
