"""One generation request as the engine sees it."""
from dataclasses import dataclass, field
from enum import Enum, auto

from reference_impl.control.sampling import GREEDY, SamplingParams


class Status(Enum):
    WAITING = auto()
    RUNNING = auto()
    FINISHED = auto()


@dataclass(slots=True, eq=False)  # identity: the scheduler looks requests up in lists
class Sequence:
    req_id: int
    prompt_ids: list[int]
    max_new_tokens: int
    eos_token_id: int | None = None
    output_ids: list[int] = field(default_factory=list)
    status: Status = Status.WAITING
    num_preemptions: int = 0
    placement: dict[int, int] = field(default_factory=dict)  # inst_id -> rBlocks, when it finished
    prefill_left: int = 0  # chunked prefill: prompt tokens whose KV is still to compute
    chunk_tokens: int = 0  # chunked prefill: prompt tokens of this step (0: a decode step)
    logits: list = field(default_factory=list)  # per generated token, when recorded
    sampling: SamplingParams = GREEDY
    num_prompt_tokens: int = field(init=False, default=0)  # len(prompt_ids), read once (a hot path)

    def __post_init__(self):
        self.num_prompt_tokens = len(self.prompt_ids)

    @property
    def token_ids(self) -> list[int]:
        return self.prompt_ids + self.output_ids

    @property
    def num_tokens(self) -> int:
        return self.num_prompt_tokens + len(self.output_ids)

    @property
    def is_finished(self) -> bool:
        if len(self.output_ids) >= self.max_new_tokens:
            return True
        return self.eos_token_id is not None and bool(self.output_ids) and self.output_ids[-1] == self.eos_token_id


def num_blocks_for(num_tokens: int, block_size: int) -> int:
    return -(-num_tokens // block_size)
