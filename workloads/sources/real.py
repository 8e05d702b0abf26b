from dataclasses import dataclass

import numpy as np


@dataclass(slots=True, eq=False)  # hashed by identity: cached fits key on it
class RealLengths:
    """Token counts of real requests: prompt_lens [n], output_lens [n], ids [n], and where they came from."""

    name: str
    prompt_lens: np.ndarray
    output_lens: np.ndarray
    ids: list[str]

    @property
    def context_lens(self) -> np.ndarray:
        return self.prompt_lens + self.output_lens

    def __len__(self) -> int:
        return len(self.ids)


def build(name: str, rows: list[tuple[str, int, int]]) -> RealLengths:
    rows = [(rid, p, o) for rid, p, o in rows if p >= 1 and o >= 1]
    return RealLengths(
        name=name,
        prompt_lens=np.array([p for _, p, _ in rows], dtype=np.int64),
        output_lens=np.array([o for _, _, o in rows], dtype=np.int64),
        ids=[rid for rid, _, _ in rows],
    )
