"""Memory of one instance: weights per GPU, KV bytes per token, reserve, and the KV capacity left."""
from dataclasses import dataclass

from reference_impl.model.config import ModelConfig
from reference_impl.errors import InputError


@dataclass(frozen=True, slots=True)
class MemoryModel:
    """Per GPU of an instance with tensor parallelism `tp` and `pp` pipeline stages (the largest stage)."""

    weight_bytes_per_gpu: float
    kv_bytes_per_token_per_gpu: float  # all layers of the stage, this GPU's KV heads
    reserve_bytes: float
    mem_bytes: float

    @classmethod
    def for_setting(cls, spec: ModelConfig, *, tp: int, pp: int, dtype_bytes: int, mem_bytes: float,
                    reserve_fraction: float) -> "MemoryModel":
        layers = spec.num_layers // pp
        embeddings = spec.vocab_size * spec.hidden_size * (2 if pp == 1 else 1)  # input embedding, untied LM head
        weights = (layers * spec.layer_params() + embeddings) / tp * dtype_bytes
        kv = 2 * spec.kv_heads_per_gpu(tp) * spec.head_dim * dtype_bytes * layers
        return cls(weights, kv, reserve_fraction * mem_bytes, mem_bytes)

    @property
    def kv_capacity_bytes(self) -> float:
        return self.mem_bytes - self.reserve_bytes - self.weight_bytes_per_gpu

    @property
    def kv_capacity_tokens(self) -> int:
        """KV tokens one instance can hold (each GPU holds its heads' share of every token)."""
        return max(0, int(self.kv_capacity_bytes // self.kv_bytes_per_token_per_gpu))

    def check_fits(self, what: str) -> None:
        if self.kv_capacity_bytes <= 0:
            raise InputError(f"{what} does not fit: {self.weight_bytes_per_gpu / 1e9:.1f} GB of weights per GPU "
                             f"leave no KV space in {self.mem_bytes / 1e9:.0f} GB less a "
                             f"{self.reserve_bytes / 1e9:.0f} GB reserve; use more GPUs (tp or pp)")
