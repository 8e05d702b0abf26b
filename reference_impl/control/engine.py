"""The cluster: instances, their rManagers and the gManager, driven step by step on any backend.

Dispatch sends a new request to the instance with the most free memory; every step each rManager sends a
heartbeat; at the first step after each `config.gmanager.interval_s` on the engine's clock the gManager runs a
round (recalls + Algorithm 1, then DGFM) and its `move_kvcache` decisions go to the requests' home rManagers, which
move KV in chunks.
"""
import itertools
import time
from functools import partial

import numpy as np

from reference_impl.control.dgfm import execute_swap
from reference_impl.control.engine_config import EngineConfig, GManagerConfig
from reference_impl.errors import InputError
from reference_impl.control.gmanager import GManager
from reference_impl.control.instance import Backend, Instance
from reference_impl.control.memo import Changes, Memo
from reference_impl.control.placement import Placement
from reference_impl.calibration.perf_model import PerfModel
from reference_impl.control.retrieval import blocks_to_retrieve, main_creditor
from reference_impl.control.cluster_index import DispatchIndex, IdleIndex, NeedIndex, TargetIndex
from reference_impl.control.room import ClusterRoom
from reference_impl.control.sequence import Sequence, num_blocks_for

__all__ = ["CHUNKED_UNSUPPORTED", "Engine", "EngineConfig", "GManagerConfig", "step_clock"]


def step_clock():
    """The engine's step count as its clock (each call one step later): a gManager round every `interval_s` steps,
    the same in every run (tests, a run compared step by step)."""
    return itertools.count().__next__


CHUNKED_UNSUPPORTED = ("this backend prefills whole prompts only (chunked prefill runs on the sim, local and Ray "
                       "engines); leave --chunked-prefill-tokens unset")


class Engine:
    def __init__(self, config: EngineConfig, backend: Backend, *, perf_model: PerfModel | None = None,
                 placement: Placement = Placement(), clock=time.perf_counter):
        """`placement`: a design's own rules for where KV goes (control/placement.py), given to every instance (priced
        with `perf_model` where they read it);
        `clock() -> seconds`: what the gManager's interval is measured on (a serving loop passes its own)."""
        self.config = config
        self.backend = backend
        self.gmanager = GManager(config, perf_model)
        placement = placement.for_cost_model(perf_model)
        self.rng = np.random.default_rng(config.seed)
        if config.chunked_prefill_tokens is not None and not getattr(backend, "supports_chunked_prefill", False):
            raise InputError(CHUNKED_UNSUPPORTED)
        peers: dict = {}
        self.changes = Changes()  # of every rManager and scheduler here: what the memos below are keyed on
        self.instances = []
        for i in range(config.num_instances):
            retrieval = partial(self._retrieval_of, i) if config.pooling else None
            self.instances.append(Instance.build(i, config, self.recommend, peers=peers, changes=self.changes,
                                                 retrieval=retrieval, placement=placement))
        self.rmanagers = peers
        self.room_blocks = config.room_blocks(placement.blocks)  # the most one request may hold (any instance its home)
        self.num_steps = 0
        self.num_rounds = 0  # gManager rounds run
        self.clock = clock
        self._next_round_s = None if not config.runs_gmanager_rounds else float("-inf")
        self.num_swaps = 0  # DGFM swaps carried out
        self._sent = Memo()  # inst_id -> its state at its last heartbeat, per gManager
        self._heard = Memo()  # (gManager, changes) at the last heartbeats
        self._room = ClusterRoom(self.rmanagers, self.changes)
        self._none_to_fill = Memo()  # (changes) at a fill_idle that found nothing
        self._min_need = Memo()  # min_waiting_blocks, per queue changes
        # the reads of the whole cluster below, kept per changed instance (cluster_index.py)
        self._dispatch = DispatchIndex(self.instances, self.changes)
        self._needs = NeedIndex(self.instances, self.changes)
        self._idle = IdleIndex(self.instances, self.changes)
        self._targets = TargetIndex(self.instances, self.changes)
        self._unheard = self.changes.reader(config.num_instances)  # changed since the last heartbeats
        self.finished: list[Sequence] = []

    def recommend(self, debtor_inst: int, num_blocks: int) -> list[int]:
        return self.gmanager.recommend_creditors(debtor_inst, num_blocks)

    def _retrieval_of(self, inst_id: int, room: int) -> int:
        return self.retrieval_blocks(self.instances[inst_id], room)

    def retrieval_blocks(self, debtor: Instance, room: int) -> int:
        """How many of `room` free blocks `debtor` spends on bringing offloaded blocks home (retrieval.py)."""
        if room <= 0:
            return 0
        creditor_id, held = main_creditor(debtor)
        if creditor_id is None:
            return 0
        return blocks_to_retrieve(self.gmanager.perf_model, debtor, self.instances[creditor_id], room, held,
                                  self.config.block_size, self.config.gmanager.max_k_evals)

    def add_request(self, seq: Sequence) -> int:
        """Dispatch to the instance with the most free memory (ties: the fewest running); returns its id."""
        self.config.check_fits(seq, self.room_blocks)
        inst = self._dispatch.best()
        inst.scheduler.add(seq)
        return inst.inst_id

    def pool_targets(self) -> list[Instance]:
        """The instances with an empty queue and room in their batch, the most free memory first (ties: the lowest
        id): where redispatch may hand a request, in its order of preference (read once per change of memory or
        queues)."""
        return list(self._targets.in_order())

    def room(self) -> ClusterRoom:
        """The cluster's room now (each instance's lendable and free rBlocks, their sums, pooled rooms): refreshed
        first when memory changed since it was last read (many events change no memory)."""
        if self._room.memory != self.changes.memory:
            self._room.refresh(self.rmanagers, self.changes)
        return self._room

    def min_waiting_blocks(self) -> int | None:
        """The fewest rBlocks a waiting request of the cluster needs at admission (None: nothing waits)."""
        return self._min_need.get(self.changes.queues, self._needs.least)

    def most_pooled_room(self) -> int:
        """A bound on every instance's pooled room: all of an instance, plus all the creditors may lend."""
        return self.config.blocks_per_instance_total + self.room().total_lendable

    def num_free(self) -> int:
        """Free rBlocks in the cluster."""
        return self.room().total_free

    def redispatch(self, inst: Instance) -> Instance | None:
        """Admission against the pool: when `inst` cannot admit its first waiting request now, hand it to the
        front of an instance with an empty queue that can (local room plus what creditors lend); that instance,
        or None."""
        s = inst.scheduler
        if not (self.config.pooling and s.waiting and s.is_head_blocked):
            return None
        need = s.head_blocks
        if need > self.most_pooled_room():
            return None  # (the common case: a request larger than an instance, with creditors short of room)
        room = self.room()
        other = next((o for o in self._targets.in_order() if o is not inst and need <= room.pooled_room(o)), None)
        if other is None:
            return None
        other.scheduler.add_first(s.take_waiting())
        s.is_head_blocked = False
        return other

    def fill_idle(self) -> list[Instance]:
        """No idle instance while work it could run waits: an instance running nothing whose first waiting
        request (if any) does not fit takes the first waiting request of the cluster that fits it now (its own
        queue first, then the others' in id order) to the front of its queue. The instances that got one."""
        if not self.config.pooling:
            return []
        changes = (self.changes.memory, self.changes.queues)
        if self._none_to_fill.holds(changes):
            return []  # nothing changed since a call that found nothing
        least = self.min_waiting_blocks()
        if least is None or least > self.most_pooled_room():
            self._none_to_fill.set(changes)
            return []  # nothing waits, or nothing waiting fits anywhere
        # The idle instances in id order whose pooled room fits the least need. Memory does not change in this
        # loop, nor does the set of waiting requests (a hand-over moves one to a filled instance's queue), so
        # `least` stands, and an instance that finds nothing leaves nothing for a later one with no more room.
        room = self.room()
        filled, min_room, start = [], least, 0
        while (inst_id := self._idle.first(start, min_room, room.total_lendable)) is not None:
            inst = self.instances[inst_id]
            start = inst_id + 1
            inst_room = room.pooled_room(inst)
            if self._take_waiting(inst, inst_room, filled):
                filled.append(inst)
            else:
                min_room = inst_room + 1
        if not filled:
            self._none_to_fill.set(changes)
        return filled

    def _take_waiting(self, inst: Instance, room: int, filled: list[Instance]) -> bool:
        """Move to the front of idle `inst`'s queue the first waiting request that fits `room`: from its own queue,
        else the others' in id order but those of `filled`. Whether there was one."""
        bs, s = self.config.block_size, inst.scheduler
        for other in self._queues_that_may_fit(inst, room):
            if other in filled:
                continue
            o = other.scheduler
            # an idle instance whose first request has not been tried yet is about to try it (it just got
            # it): taking it would hand it back and forth at one instant, with no step in between
            start = 1 if other is not inst and not o.running and not o.is_head_blocked else 0
            index = next((k for k, seq in enumerate(o.waiting)
                          if k >= start and num_blocks_for(seq.num_tokens, bs) <= room), None)
            if index is None:
                continue
            s.add_first(o.take_waiting(index))
            s.is_head_blocked = False
            self._needs.update(other.inst_id)
            self._needs.update(inst.inst_id)
            return True
        return False

    def _queues_that_may_fit(self, inst: Instance, room: int):
        """`inst`, then the other instances in id order, whose least waiting need fits `room`."""
        tree = self._needs.sync()
        if tree.values[inst.inst_id] <= room:
            yield inst
        i = tree.first_at_most(0, room)
        while i is not None:
            if i != inst.inst_id:
                yield self.instances[i]
            i = tree.first_at_most(i + 1, room)

    def heartbeats(self, full: bool = False) -> None:
        """Each rManager's heartbeat; one whose instance did not change since its last (same rManager version,
        same queues) is not sent: the gManager holds that status already and it would carry no entry."""
        heard = (self.gmanager, self.changes.memory, self.changes.queues)
        if not full and self._heard.holds(heard):
            return  # no rManager and no queue changed since the last heartbeats to this gManager
        self._heard.set(heard)
        changed = self._unheard.take()
        if full or not self._sent.holds(self.gmanager):
            changed = range(len(self.instances))  # (a new gManager has heard from none)
        sent = self._sent.get(self.gmanager, dict)
        for inst in [self.instances[i] for i in sorted(changed)]:
            s = inst.scheduler
            state = (inst.rm.version, len(s.running), len(s.waiting), s.num_waiting_blocks)
            if full or sent.get(inst.inst_id) != state:
                self.gmanager.heartbeat(inst.rm.heartbeat(inst.status(), full=full))
                sent[inst.inst_id] = state

    def restart_gmanager(self) -> None:
        """A fresh gManager (failover): the rManagers send their full state."""
        self.gmanager = GManager(self.gmanager.config, self.gmanager.perf_model)
        self.heartbeats(full=True)

    def gmanager_round(self) -> int:
        """Apply one gManager round; returns how many moves the rManagers accepted."""
        moves = self.gmanager.run_round()
        homes = self.gmanager.homes() if moves else {}
        accepted = sum(self.rmanagers[homes[m.req_id]].move_kvcache(m.req_id, m.num_blocks, m.dst_inst)
                       for m in moves if m.req_id in homes)
        if self.config.dgfm:
            swap = self.gmanager.plan_dgfm(self.rng)
            if swap is not None:
                execute_swap(swap, self.rmanagers, self.backend.copy_blocks)
                self.gmanager.swap_done(swap)
                self.num_swaps += 1
        return accepted

    def step(self) -> list[Sequence]:
        self.heartbeats()
        now_s = None if self._next_round_s is None else self.clock()
        if now_s is not None and now_s >= self._next_round_s:
            self._next_round_s = now_s + self.config.gmanager.interval_s
            self.gmanager_round()
            self.num_rounds += 1
        finished = []
        for inst in self.instances:
            finished += inst.step(self.backend)
            self.redispatch(inst)
        self.fill_idle()
        self.num_steps += 1
        self.finished += finished
        return finished

    @property
    def has_work(self) -> bool:
        return any(inst.has_work for inst in self.instances)

    def run(self, max_steps: int = 1_000_000, on_step=None) -> list[Sequence]:
        """Step until every request finished; `on_step(engine)` runs after each step."""
        stalled = 0
        while self.has_work and self.num_steps < max_steps:
            before = sum(len(s.output_ids) for i in self.instances for s in i.scheduler.running)
            finished = self.step()
            if on_step is not None:
                on_step(self)
            after = sum(len(s.output_ids) for i in self.instances for s in i.scheduler.running)
            stalled = 0 if finished or after != before else stalled + 1
            if stalled > 2 * self.config.num_instances + 8:
                raise InputError("no request can be admitted with this memory budget; raise --blocks-per-instance")
        return self.finished
