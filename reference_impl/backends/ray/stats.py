"""An instance loop's statistics (written by its loop thread only) and the per-step means read from them.

`LoopStats` travels to the driver in each snapshot the loop publishes (a copy); `RayEngine.stats()` gives the
latest per instance. Differences and sums are field by field (`after - before`, `LoopStats.total`); results
files get `asdict(StepMeans.of(...))`."""
from dataclasses import dataclass, fields, replace

from reference_impl.backends.ray.owned import Owned


@dataclass
class LoopStats(Owned):
    num_steps: int = 0  # steps run (a step with only KV moves included)
    num_moves_accepted: int = 0  # the gManager's move_kvcache instructions taken ...
    num_moves_refused: int = 0  # ... and refused (no room left where they pointed)
    num_full_heartbeats: int = 0
    num_gmanager_restarts: int = 0  # new gManager incarnations seen in heartbeat replies
    num_swaps: int = 0  # DGFM swaps carried out here
    num_copied_blocks: int = 0  # KV blocks this home's moves and swaps copied
    num_requests_moved: int = 0  # requests this home moved whole to another instance (a design's move rule) ...
    num_moves_declined: int = 0  # ... and the moves its rule asked for that the destination refused
    num_adopted: int = 0  # requests moved here whole, adopted once their KV landed
    num_migrations_started: int = 0  # live migrations out of here (migration.py) ...
    num_migrations_completed: int = 0
    num_migrations_aborted: int = 0
    num_migrations_refused: int = 0  # (asked for a request not running here, or migrating already)
    num_precopy_stages: int = 0  # ... and their stages copied while the request decoded here
    num_sp_prefills: int = 0  # prompts this home had prefilled sequence-parallel by 2 or more members ...
    num_sp_segments: int = 0  # ... and their segments (members) in all
    num_split_steps: int = 0  # steps that prefilled sequence-parallel (this home's share of num_steps) ...
    split_step_s: float = 0.0  # ... and their wall clock (as step_s)
    num_remote_steps: int = 0  # steps that asked another instance to attend (remote MicroAttention) ...
    remote_step_s: float = 0.0  # ... and their wall clock
    num_partner_calls: int = 0  # partners' parts of this home's steps sent
    num_served: int = 0  # debtors' steps served here
    num_peer_calls: int = 0  # control-phase calls on a peer's rManager that waited for the reply
    step_s: float = 0.0  # wall clock of the steps, control phase included
    control_s: float = 0.0  # control phases, peers' replies excluded (they are in messaging_s)
    compute_s: float = 0.0  # the model (or only the moves), data-plane waits excluded
    wait_s: float = 0.0  # waits on partners over the data plane
    messaging_s: float = 0.0  # partner calls sent, peers' and the gManager's replies waited for
    serve_compute_s: float = 0.0  # serving debtors' steps (MicroAttention, KV stores), waits excluded, wall clock
    serve_cpu_s: float = 0.0  # ... in the serving threads' CPU time
    reply_wait_s: float = 0.0  # waits for the partners' calls of earlier steps to return (part of messaging_s)
    peer_call_s: float = 0.0  # the num_peer_calls calls' round trips (part of messaging_s)
    compute_cpu_s: float = 0.0  # the loop thread's CPU time in compute phases (beside compute_s on the wall clock)
    control_cpu_s: float = 0.0  # ... in the control phases of steps (waiting for a reply costs little CPU)

    def copy(self) -> "LoopStats":
        """An unclaimed copy, for other threads to read."""
        return replace(self)

    def __sub__(self, other: "LoopStats") -> "LoopStats":
        return LoopStats(**{f.name: getattr(self, f.name) - getattr(other, f.name) for f in fields(self)})

    def __add__(self, other: "LoopStats") -> "LoopStats":
        return LoopStats(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)})

    @staticmethod
    def total(stats) -> "LoopStats":
        return sum(stats, LoopStats())


@dataclass(frozen=True, slots=True)
class StepMeans:
    """Means per step over some instances' loops (ms), and the counts the comparisons read."""

    num_steps: dict[str, int]  # per instance
    step_ms: float
    control_ms: float
    compute_ms: float
    wait_ms: float
    messaging_ms: float
    reply_wait_ms: float
    peer_call_ms: float  # waiting peer calls' time per step ...
    compute_cpu_ms: float
    control_cpu_ms: float
    num_served: int
    num_peer_calls: int
    peer_call_each_ms: float  # ... and per call (0 without one)
    num_partner_calls: int
    serve_ms: float  # a creditor's work per served step, wall clock ...
    serve_cpu_ms: float  # ... and CPU time
    num_moves_accepted: int
    num_moves_refused: int
    num_copied_blocks: int
    num_sp_prefills: int = 0  # prompts prefilled sequence-parallel, and their segments (sp_prefill.py)
    num_sp_segments: int = 0
    num_split_steps: int = 0  # steps of each kind, and the mean wall clock of one (ms; 0 without one)
    split_step_ms: float = 0.0
    num_remote_steps: int = 0
    remote_step_ms: float = 0.0

    @classmethod
    def of(cls, stats: dict[int, LoopStats]) -> "StepMeans":
        t = LoopStats.total(stats.values())
        step, call, served = 1e3 / max(1, t.num_steps), 1e3 / max(1, t.num_peer_calls), 1e3 / max(1, t.num_served)
        return cls({str(i): s.num_steps for i, s in sorted(stats.items())},
                   step * t.step_s, step * t.control_s, step * t.compute_s, step * t.wait_s, step * t.messaging_s,
                   step * t.reply_wait_s, step * t.peer_call_s, step * t.compute_cpu_s, step * t.control_cpu_s,
                   t.num_served, t.num_peer_calls, call * t.peer_call_s, t.num_partner_calls,
                   served * t.serve_compute_s, served * t.serve_cpu_s,
                   t.num_moves_accepted, t.num_moves_refused, t.num_copied_blocks, t.num_sp_prefills,
                   t.num_sp_segments, t.num_split_steps, 1e3 * t.split_step_s / max(1, t.num_split_steps),
                   t.num_remote_steps, 1e3 * t.remote_step_s / max(1, t.num_remote_steps))
