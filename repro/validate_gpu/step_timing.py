"""How validate-gpu times one engine step: the step as the engine calls the backend, its wall time after a warm-up
(the device synchronised), the requests and rBlocks of a point, and a prefill's FLOPs (steps.py, step_variants.py,
pooling.py)."""
import statistics
import time
from types import SimpleNamespace

import torch

from reference_impl.control.rblock import DEVICE, RBlock
from reference_impl.control.sequence import Sequence

BLOCK_SIZE = 16


def prefill_flops(config, n: int) -> float:
    """2 x (parameters touched per token) x n for the matrices, plus causal attention's QK and PV products."""
    c = config
    kv = c.num_kv_heads * c.head_dim
    per_layer = c.hidden_size * (2 * c.hidden_size + 2 * kv) + 3 * c.hidden_size * c.intermediate_size
    matrices = 2 * n * c.num_layers * per_layer + 2 * c.hidden_size * c.vocab_size  # LM head on the last token
    return matrices + 2 * c.num_layers * c.hidden_size * n * (n + 1)


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run_step(backend, seqs, tables, is_prefill: bool) -> None:
    """One engine step of `seqs` (`tables[i]`: the rBlocks of `seqs[i]`), as the engine calls the backend."""
    instance = SimpleNamespace(inst_id=0, rm=SimpleNamespace(tables={s.req_id: t for s, t in zip(seqs, tables)}))
    backend.execute(instance, seqs, is_prefill)  # returns the ids on the host: the step is done


def timed_step_s(backend, seqs, tables, is_prefill: bool, reps: int) -> float:
    """Median wall seconds of one engine step over `reps`, after one warm-up."""
    samples = []
    for _ in range(reps + 1):
        sync(backend.device)
        start = time.perf_counter()
        run_step(backend, seqs, tables, is_prefill)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples[1:])


def on_instance(addresses: list[int], inst_id: int = 0):
    """A request's rBlocks at `addresses` of one instance's device tier."""
    return [RBlock(i, inst_id, DEVICE, a) for i, a in enumerate(addresses)]


def sequences(batch: int, tokens: int, vocab: int, rng, decode: bool):
    seqs = []
    for i in range(batch):
        ids = rng.integers(0, vocab, tokens).tolist()
        seq = Sequence(i, ids[:-1] if decode else ids, 2)
        if decode:
            seq.output_ids.append(ids[-1])
        seqs.append(seq)
    return seqs
