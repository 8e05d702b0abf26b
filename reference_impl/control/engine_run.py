"""What a design gives a real backend (the local engine, the Ray backend) besides the engine config its cluster
makes: its placement rules, the instances new requests go to, and its rule for moving requests whole between
instances. Each is given to the backend's constructor; nothing is changed on a built engine."""
from dataclasses import dataclass

from reference_impl.control.engine_config import EngineConfig
from reference_impl.control.placement import Placement


@dataclass(frozen=True)
class EngineRun:
    config: EngineConfig
    placement: Placement = Placement()  # (control/placement.py)
    homes: tuple[int, ...] | None = None  # the instances new requests are dispatched to (None: all)
    moves: object | None = None  # a rule moving running requests whole (control/request_move.py RequestMoves)

    def room_blocks(self) -> int:
        """The most rBlocks one request may hold in this run (its placement's rBlocks, from the instances it goes to)."""
        return self.config.room_blocks(self.placement.blocks, self.homes)
