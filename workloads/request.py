from dataclasses import asdict, dataclass

from reference_impl.errors import InputError


@dataclass(frozen=True, slots=True)
class Request:
    """One serving request: arrives at `arrival_s`, brings `prompt_len` tokens, generates `output_len`.

    `source` says where its lengths came from, e.g. "sharegpt-v3:QWJhYvA_0" or "fitted:trace-4".
    """

    req_id: int
    arrival_s: float
    prompt_len: int
    output_len: int
    source: str

    def __post_init__(self):
        if self.prompt_len < 1 or self.output_len < 1:
            raise InputError(f"request {self.req_id}: prompt_len and output_len must be >= 1")
        if not self.arrival_s >= 0.0:
            raise InputError(f"request {self.req_id}: arrival_s must be >= 0, got {self.arrival_s}")

    @property
    def context_len(self) -> int:
        return self.prompt_len + self.output_len

    def to_dict(self) -> dict:
        return asdict(self)
