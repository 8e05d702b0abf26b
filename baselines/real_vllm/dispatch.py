"""vLLM-M dispatch: a new request goes to the engine with the most free KV memory (infinite-llm Section 7).

Pure standard library: the runner imports it inside the vLLM environment, the adapter's tests outside it.
Free memory is counted in KV blocks from what each engine holds now (prompt + tokens generated so far of
its live requests), the bookkeeping vLLM's own block manager keeps; a request that cannot fit one engine
even alone (or exceeds the engine's max model length) is rejected, as a vLLM-M instance does.
"""
from dataclasses import dataclass, field

REJECTED = -1


def blocks_for(num_tokens: int, block_size: int) -> int:
    return -(-num_tokens // block_size)


@dataclass(slots=True)
class MostFreeDispatcher:
    num_engines: int
    blocks_per_engine: int
    block_size: int
    max_request_tokens: int | None = None  # vLLM's max_model_len: longer requests are rejected too
    used_blocks: list[int] = field(default_factory=list)
    live: dict = field(default_factory=dict)  # req_id -> (engine, tokens held now)

    def __post_init__(self):
        if self.num_engines < 1 or self.blocks_per_engine < 1 or self.block_size < 1:
            raise ValueError("need at least one engine, one block per engine and a block size >= 1")
        self.used_blocks = [0] * self.num_engines

    def free_blocks(self, engine: int) -> int:
        return self.blocks_per_engine - self.used_blocks[engine]

    def choose(self, req_id, prompt_len: int, max_tokens: int) -> int:
        """Engine index for a new request (lowest index on ties), or REJECTED if it fits no engine alone."""
        if blocks_for(prompt_len + max_tokens, self.block_size) > self.blocks_per_engine:
            return REJECTED
        if self.max_request_tokens is not None and prompt_len + max_tokens > self.max_request_tokens:
            return REJECTED
        engine = max(range(self.num_engines), key=lambda e: (self.free_blocks(e), -e))
        self.live[req_id] = (engine, prompt_len)
        self.used_blocks[engine] += blocks_for(prompt_len, self.block_size)
        return engine

    def on_tokens(self, req_id, num_tokens: int) -> None:
        """The request now holds `num_tokens` tokens of KV (prompt + generated)."""
        engine, held = self.live[req_id]
        self.used_blocks[engine] += blocks_for(num_tokens, self.block_size) - blocks_for(held, self.block_size)
        self.live[req_id] = (engine, num_tokens)

    def on_finish(self, req_id) -> None:
        engine, held = self.live.pop(req_id)
        self.used_blocks[engine] -= blocks_for(held, self.block_size)
