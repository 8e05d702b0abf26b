"""Performance model of one instance (infinite-llm Eq. 5-7), the interface Algorithm 1 and the simulator call.

    T_layer(beta, S) = W(beta) / f(beta) + sum_r S_r / g(S)          (Eq. 5)
    debtor:   T_layer - K_d / g(S);   creditor: T_layer + K_c / g(S)  (Eq. 6)
    TPS = beta / (n_layers * T_layer);  TPS_cluster = sum_i TPS_i     (Eq. 7)

`InstanceLoad` carries what one decode step of an instance must do; a `PerfModel` turns it into seconds.
`AnalyticPerfModel` is a roofline from specifications; the calibrated model (fitted to real profiles)
implements the same protocol.
"""
from dataclasses import dataclass
from typing import Protocol


@dataclass(slots=True)  # (not frozen: the simulator builds one a step, and a frozen dataclass is 4x slower to build)
class InstanceLoad:
    batch_size: int  # beta: decode requests whose non-attention layers run on this instance
    attn_kv_tokens: int  # KV tokens this instance reads in attention: its own local ones plus those it hosts
    num_remote_queries: int = 0  # (request, creditor) pairs: a query out and an (out, lse) back per layer
    prefill_tokens: int = 0  # prompt tokens processed in this step (non-attention cost)
    prefill_attn_pairs: int = 0  # prefill attention: sum over prompt chunks of (query token, KV token) pairs


def causal_prefill_pairs(num_new_tokens: int, num_cached_tokens: int = 0) -> int:
    """(query, key) pairs of causal attention for a prompt chunk after `num_cached_tokens` of prefix."""
    return num_new_tokens * num_cached_tokens + num_new_tokens * (num_new_tokens + 1) // 2


class PerfModel(Protocol):
    num_layers: int

    def layer_time_s(self, load: InstanceLoad) -> float: ...


def step_time_s(model: PerfModel, load: InstanceLoad) -> float:
    return model.num_layers * model.layer_time_s(load)


def throughput_tok_s(model: PerfModel, load: InstanceLoad) -> float:
    """Eq. 7 for one instance: decode tokens per second."""
    if load.batch_size == 0:
        return 0.0
    return load.batch_size / step_time_s(model, load)


@dataclass(frozen=True, slots=True)
class AnalyticPerfModel:
    """Roofline per layer: weights (or GEMM flops) for non-attention, KV bytes for attention.

    Defaults: LLaMA2-7B in fp16 on one A100-80GB-SXM (HBM 2039 GB/s, 312 TFLOP/s bf16; datasheet).
    """

    num_layers: int = 32
    layer_weight_bytes: float = 2 * (4 * 4096 * 4096 + 3 * 4096 * 11008)
    layer_flops_per_token: float = 2 * (4 * 4096 * 4096 + 3 * 4096 * 11008)
    kv_bytes_per_token_per_layer: float = 2 * 2 * 4096
    hbm_bytes_per_s: float = 2039e9
    peak_flops: float = 312e12
    link_bytes_per_s: float = 600e9
    link_latency_s: float = 10e-6
    query_bytes: float = 2 * 4096

    def layer_time_s(self, load: InstanceLoad) -> float:
        tokens = load.batch_size + load.prefill_tokens
        non_attn = max(self.layer_weight_bytes / self.hbm_bytes_per_s,
                       tokens * self.layer_flops_per_token / self.peak_flops) if tokens else 0.0
        attn = load.attn_kv_tokens * self.kv_bytes_per_token_per_layer / self.hbm_bytes_per_s
        comm = 0.0
        if load.num_remote_queries:
            comm = self.link_latency_s + load.num_remote_queries * 2 * self.query_bytes / self.link_bytes_per_s
        return non_attn + attn + comm
