"""The engine's knobs, each declared once: the cluster's (EngineConfig) and the gManager's (GManagerConfig, held
by EngineConfig). The simulator's config holds an EngineConfig beside its own fields (sim/config.py)."""
from dataclasses import dataclass, replace

from reference_impl.errors import InputError
from reference_impl.control.sequence import Sequence, num_blocks_for

# The gManager's cadence, seconds between its rounds (heartbeats, recalls, Algorithm 1, DGFM): one field
# (GManagerConfig.interval_s) read by every backend, on the simulator's clock, the local engine's and Ray's timer.
GMANAGER_INTERVAL_S = 1.0


@dataclass(frozen=True, slots=True)
class GManagerConfig:
    interval_s: float | None = GMANAGER_INTERVAL_S  # between rounds; None: no rounds (spilling still asks it)
    beta_thres: int = 16  # debtors: batch <= beta_thres
    util_thres: float = 0.7  # creditors: memory utilisation <= U_thres
    num_candidates: int | None = 3  # creditor recommendations per query (distkv-llm 4.4); None: every instance
    instances_per_node: int = 8  # locality: creditors on the debtor's node come first
    dgfm_min_blocks: int = 1  # DGFM swaps a cycle only when its smallest debt is at least this
    max_k_evals: int | None = None  # Algorithm 1's block-count search: None = every k; else coarse-to-fine

    def __post_init__(self):
        if self.interval_s is not None and not self.interval_s > 0:
            raise InputError(f"gManager interval must be > 0 s (got {self.interval_s})")


@dataclass(frozen=True, slots=True)
class EngineConfig:
    num_instances: int = 1
    blocks_per_instance: int = 64  # device-tier rBlocks per instance
    cpu_blocks_per_instance: int = 0
    block_size: int = 16  # tokens per rBlock
    max_batch_size: int = 64
    pooling: bool = True  # False: KV never leaves its instance (vLLM-M); preempt by recompute instead
    max_lent_blocks: int | None = None  # cap on rBlocks lent to remote instances; None = no cap
    move_chunk_tokens: int = 16  # KV moved per instance and step
    dgfm: bool = True
    # True: infinite-llm 5.2, no instance borrows and lends at once (the rManagers refuse it, the gManager never
    # recommends a debtor as a creditor); False: distkv-llm 4.5 (DGFM cancels the cycles). Algorithm 1 keeps 5.2's rule
    exclusive_roles: bool = True
    chunked_prefill_tokens: int | None = None  # tokens per step, decodes included; None: whole prompts
    seed: int = 0
    gmanager: GManagerConfig = GManagerConfig()

    def __post_init__(self):
        if self.num_instances < 1:
            raise InputError(f"need at least one instance (got {self.num_instances})")
        if self.block_size < 1 or self.max_batch_size < 1 or self.move_chunk_tokens < 1:
            raise InputError("block size, batch size and move chunk must be >= 1")
        if self.chunked_prefill_tokens is not None and self.chunked_prefill_tokens < self.block_size:
            raise InputError(f"chunked prefill needs at least one block of tokens per step ({self.block_size})")
        if self.blocks_per_instance < 0 or self.cpu_blocks_per_instance < 0:
            raise InputError("block counts must be non-negative")

    @property
    def runs_gmanager_rounds(self) -> bool:
        """Whether the gManager's rounds run: only a pooled cluster moves KV, and only with an interval."""
        return self.pooling and self.gmanager.interval_s is not None

    def without_gmanager_rounds(self) -> "EngineConfig":
        """This config with no gManager rounds (a design that never rebalances KV by moves)."""
        return replace(self, gmanager=replace(self.gmanager, interval_s=None))

    @property
    def blocks_per_instance_total(self) -> int:
        return self.blocks_per_instance + self.cpu_blocks_per_instance

    def room_blocks(self, blocks=None, homes=None, instances=None) -> int:
        """The most rBlocks one request may hold: its instance's, plus what the others may lend it when pooling.
        `blocks`: a design's rBlocks per instance (Placement.blocks: id -> rBlocks, also its lending cap, or None
        for the config's); `homes`: the instances requests are dispatched to (None: all); `instances`: the ids of
        the cluster's instances (None: 0 to num_instances - 1)."""
        if blocks is None:
            room = self.blocks_per_instance_total
            lent = room if self.max_lent_blocks is None else min(room, self.max_lent_blocks)
            return room + self.pooling * (self.num_instances - 1) * lent
        ids = range(self.num_instances) if instances is None else instances
        own, lent = {}, {}
        for i in ids:
            cap = blocks(i)
            own[i] = self.blocks_per_instance_total if cap is None else cap + self.cpu_blocks_per_instance
            lent[i] = min(own[i], cap if cap is not None else own[i] if self.max_lent_blocks is None
                          else self.max_lent_blocks)
        total_lent = sum(lent.values())
        return max((own[h] + self.pooling * (total_lent - lent[h]) for h in ids if homes is None or h in homes),
                   default=0)

    def fits(self, seq: Sequence) -> bool:
        """Whether `seq`, prompt and all its new tokens, fits somewhere in this cluster."""
        return num_blocks_for(seq.num_tokens + seq.max_new_tokens, self.block_size) <= self.room_blocks()

    def check_fits(self, seq: Sequence, room: int | None = None) -> None:
        """Raise InputError when `seq`, prompt and all its new tokens, fits nowhere in this cluster (`room`: its
        room_blocks under a design's placement, where one was computed)."""
        need = num_blocks_for(seq.num_tokens + seq.max_new_tokens, self.block_size)
        room = self.room_blocks() if room is None else room
        if need > room:
            raise InputError(f"request {seq.req_id} needs {need} rBlocks of {self.block_size} tokens but "
                             f"the {'cluster' if self.pooling else 'instance'} has {room}; "
                             + ("raise --blocks-per-instance or --instances" if self.pooling else
                                "raise --blocks-per-instance (with --no-pooling a request must fit one instance)"))
