"""How a request picks its next token: greedy (the default and the tested reference), or temperature and top-p."""
import math
from dataclasses import dataclass

from reference_impl.errors import InputError

MAX_TEMPERATURE = 100.0


@dataclass(frozen=True, slots=True)
class SamplingParams:
    temperature: float = 0.0  # 0: greedy
    top_p: float = 1.0  # the smallest set of tokens whose probability reaches top_p
    seed: int | None = None  # a seeded request draws the same tokens whatever it is batched with

    def __post_init__(self):
        if not isinstance(self.temperature, (int, float)) or not 0 <= self.temperature <= MAX_TEMPERATURE \
                or math.isnan(self.temperature):
            raise InputError(f"temperature must be a number in [0, {MAX_TEMPERATURE:g}], got {self.temperature!r}")
        if not isinstance(self.top_p, (int, float)) or not 0 < self.top_p <= 1:
            raise InputError(f"top_p must be a number in (0, 1], got {self.top_p!r}")
        if self.seed is not None and (type(self.seed) is not int or not 0 <= self.seed < 2**63):
            raise InputError(f"seed must be an integer in [0, 2**63), got {self.seed!r}")

    @property
    def is_greedy(self) -> bool:
        return self.temperature == 0.0


GREEDY = SamplingParams()
