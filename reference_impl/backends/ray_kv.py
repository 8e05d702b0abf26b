"""DistAttention across Ray actors: the home instance plans the step with `StepKV`; per layer, the new K/V that
belong in a creditor's rBlocks and the query go to that creditor, which returns `(out, lse)` of its part.

Partials are merged in `StepKV`'s location order, so the result is the local backend's, term for term.
"""
import math

import ray
import torch

from reference_impl.kernels import micro_attention
from reference_impl.kv_layer import StepKV, causal_partial_attention, merge


def attend_part(caches: dict, layer: int, q, job: dict) -> list:
    """A creditor's share of one layer. caches: tier -> (k, v) [L, N, block, Hkv, D]; q [T, Hq, D];
    job: "writes" [(tier, addresses, offsets, k [n, Hkv, D], v)], "decode" [(tier, block_table, seq_lens)],
    "prefill" [(tier, q_start, q_end, pos_q, addresses, pos_k, valid)]. Returns [(out, lse)] in job order."""
    for tier, addr, off, k, v in job["writes"]:
        k_cache, v_cache = caches[tier]
        k_cache[layer, addr, off] = k.to(k_cache.dtype)
        v_cache[layer, addr, off] = v.to(v_cache.dtype)
    parts = []
    for tier, block_table, seq_lens in job["decode"]:
        k_cache, v_cache = caches[tier]
        parts.append(micro_attention(q, k_cache[layer], v_cache[layer], block_table, seq_lens, check_ranges=False))
    scale = 1.0 / math.sqrt(q.shape[-1])
    for tier, start, end, pos_q, addresses, pos_k, valid in job["prefill"]:
        k_cache, v_cache = caches[tier]
        k = k_cache[layer, addresses].flatten(0, 1)[valid]
        v = v_cache[layer, addresses].flatten(0, 1)[valid]
        parts.append(causal_partial_attention(q[start:end], k, v, pos_q, pos_k[valid], scale))
    return parts


class ActorStepKV(StepKV):
    """`StepKV` of instance `inst_id` whose caches hold only its own tiers; `peers` maps inst_id -> actor handle."""

    def __init__(self, inst_id: int, peers: dict, caches, tables, num_tokens, num_new, block_size, is_prefill, device):
        super().__init__(caches, tables, num_tokens, num_new, block_size, is_prefill, device)
        self.inst_id = inst_id
        self.peers = peers

    def _decode_parts(self):
        # (location, [num_parts,] block_table, seq_lens): an actor's caches never share storage, one part each
        return [(part[0], part[-2], part[-1]) for part in self.decode_parts]

    def _job(self, jobs: dict, inst: int) -> dict:
        return jobs.setdefault(inst, {"writes": [], "decode": [], "prefill": []})

    def attend(self, layer: int, q, k, v):
        jobs: dict[int, dict] = {}
        for (inst, tier), (idx, addr, off) in self.writes.items():
            if inst == self.inst_id:
                k_cache, v_cache = self.caches[(inst, tier)]
                k_cache[layer, addr, off] = k[idx].to(k_cache.dtype)
                v_cache[layer, addr, off] = v[idx].to(v_cache.dtype)
            else:
                self._job(jobs, inst)["writes"].append((tier, addr, off, k[idx], v[idx]))
        order = []  # (inst, index in that inst's answer) per partial, in StepKV's order
        if self.is_prefill:
            for (start, end), pos_q, parts in zip(self.query_spans, self.positions, self.prefill_parts):
                for (inst, tier), addresses, pos_k, valid in parts:
                    if inst != self.inst_id:
                        self._job(jobs, inst)["prefill"].append((tier, start, end, pos_q, addresses, pos_k, valid))
        else:
            for (inst, tier), block_table, seq_lens in self._decode_parts():
                if inst != self.inst_id:
                    job = self._job(jobs, inst)
                    order.append((inst, len(job["decode"])))
                    job["decode"].append((tier, block_table, seq_lens))
                else:
                    order.append((inst, None))
        futures = {inst: self.peers[inst].attend_part.remote(layer, q, job) for inst, job in jobs.items()}
        if self.is_prefill:
            return self._merge_prefill(layer, q, futures)
        answers = dict(zip(futures, ray.get(list(futures.values()))))
        parts = []
        for ((inst, tier), block_table, seq_lens), (_, index) in zip(self._decode_parts(), order):
            if index is None:
                k_cache, v_cache = self.caches[(inst, tier)]
                parts.append(micro_attention(q, k_cache[layer], v_cache[layer], block_table, seq_lens,
                                             check_ranges=False))
            else:
                parts.append(answers[inst][index])
        return merge(parts)

    def _merge_prefill(self, layer, q, futures):
        answers = {inst: iter(a) for inst, a in zip(futures, ray.get(list(futures.values())))}
        scale = 1.0 / math.sqrt(q.shape[-1])
        outs = []
        for (start, end), pos_q, parts in zip(self.query_spans, self.positions, self.prefill_parts):
            partials = []
            for (inst, tier), addresses, pos_k, valid in parts:
                if inst != self.inst_id:
                    partials.append(next(answers[inst]))
                    continue
                k_cache, v_cache = self.caches[(inst, tier)]
                k = k_cache[layer, addresses].flatten(0, 1)[valid]
                v = v_cache[layer, addresses].flatten(0, 1)[valid]
                partials.append(causal_partial_attention(q[start:end], k, v, pos_q, pos_k[valid], scale))
            outs.append(merge(partials).to(q.dtype))
        return torch.cat(outs)
