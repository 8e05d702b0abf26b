"""How many offloaded blocks a debtor brings home: Eq. 7 on the debtor and its main creditor (infinite-llm 5.2).

A debtor with free local room may grow its batch (admit waiting requests into that room) or retrieve blocks it
offloaded (the creditor then has that room for its own waiting requests, and less MicroAttention to run for
the debtor; the debtor reads that KV itself). Both are valued with Algorithm 1's model of an instance
(`algorithm1._load`: waiting requests are admitted into free blocks): the k in [0, room] that maximises the
two instances' modelled throughput after k blocks come home from the creditor holding most of the debtor's
remote blocks. k = 0 keeps the room for a larger batch.
"""
from reference_impl.control.algorithm1 import _load, best_block_count
from reference_impl.calibration.perf_model import PerfModel, throughput_tok_s


def _state(inst) -> tuple:
    """(batch, KV blocks here, free blocks, waiting requests, mean waiting blocks, remote queries) of an instance."""
    s, rm = inst.scheduler, inst.rm
    remote = sum(len(h) - (rm.inst_id in h) for h in (rm.holders(seq.req_id) for seq in s.running))
    return len(s.running), rm.pool.num_used, rm.num_free, len(s.waiting), s.mean_waiting_blocks(), remote


def main_creditor(debtor) -> tuple[int | None, int]:
    """The instance holding most of the debtor's home requests' blocks elsewhere, and how many it holds."""
    held: dict[int, int] = {}
    for req_id in debtor.rm.tables:
        for inst_id, n in debtor.rm.holders(req_id).items():
            if inst_id != debtor.inst_id:
                held[inst_id] = held.get(inst_id, 0) + n
    if not held:
        return None, 0
    inst_id = max(held, key=lambda i: (held[i], -i))
    return inst_id, held[inst_id]


def blocks_to_retrieve(model: PerfModel, debtor, creditor, room: int, held: int, block_size: int,
                       max_evals: int | None = None) -> int:
    """The k in [0, min(room, held)] maximising the debtor's and creditor's modelled throughput (Eq. 7) once k
    blocks came home (the debtor's remote queries counted as they are: a conservative estimate)."""
    d_batch, d_kv, d_free, d_wait, d_mean, d_rq = _state(debtor)
    c_batch, c_kv, c_free, c_wait, c_mean, c_rq = _state(creditor)

    def tps(k: int) -> float:
        d = _load(d_batch, d_kv + k, d_free - k, d_wait, d_mean, d_rq, block_size)
        c = _load(c_batch, c_kv - k, c_free + k, c_wait, c_mean, c_rq, block_size)
        return throughput_tok_s(model, d) + throughput_tok_s(model, c)

    return best_block_count(tps, max(0, min(room, held)), max_evals)
