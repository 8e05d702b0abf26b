"""A100 times of one decode query's attention spread over GPUs, from the calibrated cost model.

Terms (all from reference_impl/calibration, none from the papers):
  KV read   bytes / achieved decode KV read rate. DistServe's decode slopes of OPT-13B (the attention
            dimensions of LLaMA2-13B: 40 heads of 128) at TP 1/2/4 give the rate at 40/20/10 heads per
            GPU; a GPU with h heads takes the sample with the fewest heads >= h (fewer heads than any
            sample: the 10-head rate), so fewer heads per GPU is never modelled as faster.
  messages  the calibration's measured NVLink ("intra-node") send/recv curve: one message for the
            query out, one for the (out, lse) results back (ranks send in parallel).
  ring hop  max(compute on the held shard, sending the next K/V shard), P - 1 hops then the last shard.
"""
from dataclasses import dataclass

from reference_impl.calibration import coefficients
from reference_impl.calibration.model import LSE_BYTES, Link, resolve_link
from reference_impl.calibration.specs import model_spec
from reference_impl.calibration.links import INTRA_NODE

GPU = "A100-80GB-SXM"
RATE_MODEL = "facebook/opt-13b"  # same attention dims as LLaMA2-13B
RATE_MODEL_HEADS = 40


@dataclass(frozen=True, slots=True)
class AttentionCostModel:
    head_dim: int
    num_heads: int
    dtype_bytes: int
    rates_by_heads: tuple[tuple[int, float], ...]  # (heads per GPU, KV read bytes/s), ascending heads
    hbm_bytes_per_s: float
    link: Link

    @classmethod
    def for_model(cls, model: str = "llama2-13b", gpu: str = GPU, link: str = INTRA_NODE) -> "AttentionCostModel":
        hw = coefficients.load()["hardware"][gpu]
        spec = model_spec(model)
        samples = [s for s in hw["attention"]["samples"] if s["model"] == RATE_MODEL]
        rates = tuple(sorted((RATE_MODEL_HEADS // s["tp"], s["kv_read_bytes_per_s"]) for s in samples))
        return cls(spec.head_dim, spec.num_heads, hw["dtype_bytes"], rates, hw["hbm_bytes_per_s"],
                   resolve_link(hw, link, gpu))

    def kv_rate(self, heads: int) -> float:
        for sample_heads, rate in self.rates_by_heads:
            if sample_heads >= heads:
                return rate
        return self.rates_by_heads[-1][1]

    def kv_read_s(self, tokens: int, heads: int) -> float:
        return 2 * tokens * heads * self.head_dim * self.dtype_bytes / self.kv_rate(heads)

    def query_bytes(self, heads: int) -> int:
        return heads * self.head_dim * self.dtype_bytes

    def result_bytes(self, heads: int) -> int:
        return heads * (self.head_dim * self.dtype_bytes + LSE_BYTES)

    def reduce_s(self, parts: int, heads: int) -> float:
        return parts * self.result_bytes(heads) / self.hbm_bytes_per_s

    def dist_attention(self, context_len: int, world: int) -> dict:
        """Owner sends q to world - 1 ranks, each reads context/world tokens of all heads."""
        h = self.num_heads
        return {"compute_s": self.kv_read_s(context_len // world, h),
                "comm_s": self.link.time_s(self.query_bytes(h)) + self.link.time_s(self.result_bytes(h)),
                "reduce_s": self.reduce_s(world, h),
                "bytes": (world - 1) * (self.query_bytes(h) + self.result_bytes(h))}

    def tp(self, context_len: int, world: int) -> dict:
        """Heads split over `world` GPUs, each reads every token of its heads; outputs gathered."""
        h = self.num_heads // world
        return {"compute_s": self.kv_read_s(context_len, h),
                "comm_s": self.link.time_s(self.query_bytes(h)) + self.link.time_s(self.result_bytes(h)),
                "reduce_s": 0.0, "bytes": (world - 1) * (self.query_bytes(h) + self.result_bytes(h))}

    def ring(self, context_len: int, world: int) -> dict:
        """The owner computes each of `world` shards; world - 1 K/V shard hops overlap that compute."""
        h, shard = self.num_heads, context_len // world
        compute = self.kv_read_s(shard, h)
        hop = self.link.time_s(2 * shard * h * self.head_dim * self.dtype_bytes)
        total = (world - 1) * max(compute, hop) + compute
        return {"compute_s": world * compute, "comm_s": total - world * compute, "reduce_s": self.reduce_s(world, h),
                "bytes": world * (world - 1) * 2 * shard * h * self.head_dim * self.dtype_bytes}

    def split_tp(self, context_len: int, instances: int, tp: int) -> dict:
        """`instances` TP-`tp` instances each holding context/instances tokens (DistAttention across them)."""
        h = self.num_heads // tp
        comm = 0.0
        if instances > 1:
            comm = self.link.time_s(self.query_bytes(h)) + self.link.time_s(self.result_bytes(h))
        return {"compute_s": self.kv_read_s(context_len // instances, h), "comm_s": comm,
                "reduce_s": self.reduce_s(instances, h) if instances > 1 else 0.0,
                "bytes": (instances - 1) * tp * (self.query_bytes(h) + self.result_bytes(h))}


def total_s(parts: dict) -> float:
    return parts["compute_s"] + parts["comm_s"] + parts["reduce_s"]
