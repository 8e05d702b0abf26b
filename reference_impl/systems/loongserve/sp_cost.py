"""What a sequence-parallel prefill costs on the calibrated model: a batch of prompts prefilled by k instances with
striped ring attention (LoongServe, arXiv 2404.09526 section 4; the ring of
loongserve/models/llama/layer_infer/longserve_transformer_layer_infer.py, `_context_attention_kernel`).

Per layer, every instance of the group:
- runs the non-attention layers on its stripe, ceil(sum l / k) of the batch's tokens (its own measured curve, the
  same terms as one instance's prefill: calibration/model.py);
- attends its queries in k ring rounds, one per KV chunk: striping spreads the causal pairs evenly, so each round
  computes pairs / k^2 of them. While a round computes, the chunk it used goes to the next instance and the
  previous instance's arrives (the ring issues the send and receive beside the attention kernel, and the next
  round waits for them): a round lasts max(compute, hop), the last round has no hop, so k - 1 hops per layer.
A hop carries one stripe's KV of one layer (this GPU's KV heads; TP shards travel in parallel) over the config's
link between instances. With k = 1 this is exactly the one-instance prefill the base backend prices.
"""
from dataclasses import dataclass

from reference_impl.calibration.model import CalibratedPerfModel
from reference_impl.calibration.perf_model import InstanceLoad, causal_prefill_pairs


@dataclass(frozen=True, slots=True)
class RingPrefill:
    """One sequence-parallel prefill priced: how long it takes and the KV bytes its ring hops carry in all."""
    duration_s: float
    hop_bytes: float


def batch_shape(lengths) -> tuple[int, int]:
    """(tokens, causal attention pairs) of a batch of whole prompts of these lengths."""
    return sum(lengths), sum(causal_prefill_pairs(n) for n in lengths)


def kv_bytes_per_token_per_layer(model: CalibratedPerfModel) -> float:
    """KV bytes of one token in one layer on one GPU of the instance (its KV heads)."""
    return model.memory.kv_bytes_per_token_per_gpu * model.pp / model.num_layers


def ring_prefill(model: CalibratedPerfModel, degree: int, num_tokens: int, num_pairs: int) -> RingPrefill:
    """A batch of `num_tokens` prompt tokens with `num_pairs` causal pairs prefilled on `degree` instances."""
    stripe = -(-num_tokens // degree)
    non_attention_s = model.layer_time_s(InstanceLoad(batch_size=0, attn_kv_tokens=0, prefill_tokens=stripe))
    round_s = num_pairs / degree ** 2 * model.prefill_attn_s_per_pair
    hop = stripe * kv_bytes_per_token_per_layer(model)
    hop_s = model.link.time_s(hop) if degree > 1 else 0.0
    layer_s = non_attention_s + round_s + (degree - 1) * max(round_s, hop_s)
    return RingPrefill(model.num_layers * layer_s, model.num_layers * degree * (degree - 1) * hop * model.tp)
