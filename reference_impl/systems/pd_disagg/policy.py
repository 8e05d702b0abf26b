"""The design's decisions: a new request goes to the least loaded prefill instance; when its prefill ends (its first
token) it queues for a decode instance, the freest with room for its KV and a place in its batch (FIFO: a decode
pool out of room makes the queue wait, never over memory); room is reserved there (try_move_kvcache) and the whole
prompt's KV moves over the link (kv_transfer_s, after prefill, not layer by layer); when it lands the request moves
whole (control/request_move.py: one home at every event) and decodes there. Were the reserved room taken back by
the destination's own growth (RManager._reclaim_reservations), the landing is refused: the KV stays on the prefill
instance and the request queues again, first.
Counters (ServingRun.design_counters) at finish: see `finish`."""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from functools import cached_property

from reference_impl.control.placement import Placement
from reference_impl.control.request_move import move_request, refusal
from reference_impl.control.sequence import Sequence, num_blocks_for
from reference_impl.sim.config import blocks_per_instance
from reference_impl.sim.policy import Policy, StepHooks
from reference_impl.systems.pd_disagg.configure import split_of
from reference_impl.systems.pd_disagg.events import KVLanded, Prefilled
from reference_impl.systems.pd_disagg.rules import freest_decode, least_loaded
from reference_impl.systems.pd_disagg.split import instance_model


@dataclass(slots=True)
class Transfer:
    seq: Sequence
    src: int
    dst: int
    num_blocks: int


class PDPolicy(Policy):
    def __init__(self, config, cluster):
        super().__init__(config, cluster)
        self.bs = config.engine.block_size
        self.split = split_of(config)
        self.num_prefill = self.split.num_prefill
        self.decode_blocks = blocks_per_instance(config)
        self.prefill_blocks = (config.num_blocks if config.num_blocks is not None
                               else instance_model(config, self.split.prefill).memory.kv_capacity_tokens // self.bs)
        self.queued: deque[tuple[Sequence, int, float]] = deque()  # prefilled, waiting for decode room (since)
        self.moving: dict[int, Transfer] = {}
        self.incoming = [0] * config.engine.num_instances  # transfers on their way to each decode instance
        self.kv_bytes = self.transfer_s = self.max_transfer_s = 0.0
        self.num_transfers = self.num_failed_landings = self.num_recomputed = 0
        self.wait_s = self.max_wait_s = 0.0  # from prefill's end to the transfer's start

    def step_hooks(self) -> StepHooks:
        return StepHooks(on_prefilled=self._on_prefilled, on_preempted=self._on_preempted, on_room=self._on_room)

    def placement(self) -> Placement:
        """Prefill instances hold what their own shape's memory holds (the engine builds the decode shape's)."""
        return Placement(blocks=lambda inst_id: self.prefill_blocks if inst_id < self.num_prefill else None)

    @cached_property
    def prefill(self) -> list:
        return self.cluster.engine.instances[:self.num_prefill]

    @cached_property
    def decode(self) -> list:
        return self.cluster.engine.instances[self.num_prefill:]

    def dispatch(self, seq: Sequence) -> int | None:
        """The least loaded prefill instance (fewest rBlocks queued and held; ties: the lowest id); None when the
        request's whole context fits no prefill instance (where a preempted request is recomputed) or no decode
        instance (pooling is off)."""
        if num_blocks_for(seq.num_tokens + seq.max_new_tokens, self.bs) > min(self.prefill_blocks, self.decode_blocks):
            return None
        return self._to_prefill(seq, first=False)

    def _to_prefill(self, seq: Sequence, first: bool) -> int:
        inst = least_loaded(self.prefill)
        (inst.scheduler.add_first if first else inst.scheduler.add)(seq)
        return inst.inst_id

    # --- called by PDBackend as a step starts
    def _on_prefilled(self, inst, seqs: list[Sequence], duration_s: float) -> None:
        self.cluster.schedule([Prefilled(self.cluster.now_s() + duration_s, inst.inst_id, seqs)])

    def _on_preempted(self, seq: Sequence) -> None:
        """A decode instance preempted `seq` (its KV freed): recomputed first on the prefill pool."""
        self.num_recomputed += 1
        inst_id = self._to_prefill(seq, first=True)
        self.cluster.records[seq.req_id].inst_id = inst_id
        now_s = self.cluster.now_s()
        self.cluster.schedule(self.cluster.wake(inst_id, now_s) + self.start_transfers(now_s))

    def _on_room(self) -> None:
        self.cluster.schedule(self.start_transfers(self.cluster.now_s()))

    # --- the design's events
    def prefilled(self, src: int, seqs: list[Sequence], now_s: float) -> list:
        self.queued.extend((seq, src, now_s) for seq in seqs)
        return self.start_transfers(now_s)

    def start_transfers(self, now_s: float) -> list:
        """Start the queue's transfers, in order, while a decode instance has room for the first."""
        events = []
        while self.queued:
            seq, src, since_s = self.queued[0]
            num_blocks = len(self.cluster.engine.instances[src].rm.tables[seq.req_id])
            dst = self._decode_for(num_blocks)
            if dst is None or not dst.rm.try_move_kvcache(seq.req_id, num_blocks):
                break
            self.queued.popleft()
            self.moving[seq.req_id] = Transfer(seq, src, dst.inst_id, num_blocks)
            self.incoming[dst.inst_id] += 1
            tokens = seq.num_tokens - 1  # the prompt's KV (recomputed: and the tokens before); not the new token's
            t = self.cluster.backend.transfer_s(tokens)
            self.num_transfers += 1
            self.wait_s += now_s - since_s
            self.max_wait_s = max(self.max_wait_s, now_s - since_s)
            self.kv_bytes += self.cluster.backend.kv_bytes(tokens)
            self.transfer_s += t
            self.max_transfer_s = max(self.max_transfer_s, t)
            events.append(KVLanded(now_s + t, seq.req_id))
        return events

    def _decode_for(self, num_blocks: int):
        return freest_decode(self.decode, num_blocks, self.incoming, self.cluster.engine.config.max_batch_size)

    def landed(self, req_id: int, now_s: float) -> list:
        t = self.moving.pop(req_id)
        self.incoming[t.dst] -= 1
        src, dst = self.cluster.engine.instances[t.src], self.cluster.engine.instances[t.dst]
        if refusal(src, dst, t.seq) is not None:  # dst took the room back for its own growth
            dst.rm.cancel_reservation(req_id)
            self.num_failed_landings += 1
            self.queued.appendleft((t.seq, t.src, now_s))
            return self.start_transfers(now_s)
        move_request(src, dst, t.seq, _copied_by_the_transfer)
        self.cluster.records[req_id].inst_id = t.dst
        return self.cluster.wake(t.dst, now_s) + self.cluster.wake(t.src, now_s)

    def finish(self) -> None:
        cluster, backend = self.cluster, self.cluster.backend
        span_s = cluster.now_s() - (cluster.start_s or 0.0)
        num_tokens = sum(cluster.result.step_tokens)

        def utilisation(pool) -> float:
            return sum(backend.busy_s[i.inst_id] for i in pool) / (len(pool) * span_s) if span_s > 0 else 0.0
        s = self.split
        cluster.result.design_counters.update({
            "kv_transfer_bytes": self.kv_bytes, "kv_transfer_total_s": self.transfer_s,
            "kv_transfer_max_s": self.max_transfer_s, "kv_transfers": self.num_transfers,
            "kv_failed_landings": self.num_failed_landings, "decode_wait_total_s": self.wait_s,
            "decode_wait_max_s": self.max_wait_s, "decode_preempted_recomputed": self.num_recomputed,
            "network_bytes_per_token": self.kv_bytes / num_tokens if num_tokens else 0.0,
            "prefill_pool_utilisation": utilisation(self.prefill), "decode_pool_utilisation": utilisation(self.decode),
            "num_prefill_instances": s.num_prefill, "prefill_tp": s.prefill.tp, "prefill_pp": s.prefill.pp,
            "num_decode_instances": s.num_decode, "decode_tp": s.decode.tp, "decode_pp": s.decode.pp,
            "prefill_gpus": s.prefill_gpus, "decode_gpus": s.decode_gpus})


def _copied_by_the_transfer(pairs) -> None:
    """request_move's copy: the KV crossed the link during the transfer, priced by its KVLanded delay."""
