"""The Ray backend's data plane without Ray: two gloo processes, each an instance with its own rBlocks, each
running its own step of DistAttention (`DistStep`) as a home while a second thread serves the other's step as
its creditor (as an instance actor does), and a KV block moves in instance 1's step. Each instance's attention
must equal the local KV layer (`StepKV`) over both instances' caches in one process, in decode, prefill and
chunked steps (prompt chunks beside decodes), and the moved block must land."""
import threading
import types

import pytest
import torch

from reference_impl.backends.ray.dataplane import DataPlane
from reference_impl.backends.ray.step import DistStep, plan_step
from reference_impl.model.kv_layer import StepKV
from reference_impl.model.llama import ModelConfig
from reference_impl.control.rblock import CPU, DEVICE, RBlock
from repro.attention.ranks import run_ranks

CONFIG = ModelConfig(hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2)
BLOCK = 4
NUM_BLOCKS = 8
# per instance, its sequences: (blocks as (inst, tier, address) in token order, tokens after this step).
# Instance 0's first request lives on both instances and on its CPU tier; instance 1 borrows on instance 0.
TABLES = {0: [([(0, DEVICE, 0), (1, DEVICE, 3), (0, CPU, 2)], 10), ([(0, DEVICE, 1)], 3)],
          1: [([(1, DEVICE, 0), (1, DEVICE, 1)], 7), ([(0, DEVICE, 5), (1, DEVICE, 2)], 6), ([(1, CPU, 1)], 2)]}
MOVE = (1, DEVICE, 4, 0, DEVICE, 6)  # instance 1's block 4 -> instance 0's block 6
# a chunked step: instance 0's first request prefills a chunk over three locations, instance 1's first a chunk
# over one; the others decode beside them
CHUNKS = {0: [6, 1], 1: [5, 1, 1]}


def all_caches(device):
    gen = torch.Generator().manual_seed(7)
    shape = (CONFIG.num_layers, NUM_BLOCKS, BLOCK, CONFIG.num_kv_heads, CONFIG.head_dim)
    return {(inst, tier): (torch.randn(shape, generator=gen).to(device), torch.randn(shape, generator=gen).to(device))
            for inst in (0, 1) for tier in (DEVICE, CPU)}


def step_inputs(inst: int, mode: str, device="cpu"):
    tables = [[RBlock(-1, i, t, a) for i, t, a in blocks] for blocks, _ in TABLES[inst]]
    num_tokens = [n for _, n in TABLES[inst]]
    num_new = {"prefill": num_tokens, "decode": [1] * len(tables), "chunked": CHUNKS[inst]}[mode]
    gen = torch.Generator().manual_seed(100 + inst)
    t, c = sum(num_new), CONFIG
    qkv = [tuple(torch.randn(t, heads, c.head_dim, generator=gen).to(device)
                 for heads in (c.num_heads, c.num_kv_heads, c.num_kv_heads)) for _ in range(c.num_layers)]
    return tables, num_tokens, num_new, qkv


def one_step(rank, world_size, device, mode, backend):
    is_prefill = mode == "prefill"
    caches = all_caches(device)
    plans = {i: plan_step(*step_inputs(i, mode)[:3], BLOCK, is_prefill) for i in (0, 1)}
    pairs = {0: [], 1: [MOVE]}  # by home: the moves of its step
    plane = types.SimpleNamespace(rank_of={0: 0, 1: 1}, spec=types.SimpleNamespace(backend=backend), group=None)
    plane.post = lambda sends, recvs, tag: DataPlane.post(plane, sends, recvs, tag)
    mine = {tier: caches[(rank, tier)] for tier in (DEVICE, CPU)}
    moved = [kv[:, MOVE[2]].clone() for kv in caches[(1, DEVICE)]]
    other = 1 - rank
    ask = {other: plans[other].asks[rank]} if rank in plans[other].asks else {}
    served = DistStep(rank, plane, mine, None, ask, pairs[other], other, CONFIG, BLOCK, torch.float32, device)
    errors = []

    def serve():
        try:
            for layer in range(CONFIG.num_layers):
                served.attend(layer)
        except Exception as err:  # noqa: BLE001 (re-raised in the main thread)
            errors.append(err)

    thread = threading.Thread(target=serve)
    thread.start()
    step = DistStep(rank, plane, mine, plans[rank], {}, pairs[rank], rank, CONFIG, BLOCK, torch.float32, device)
    tables, num_tokens, num_new, qkv = step_inputs(rank, mode, device)
    reference = StepKV({k: tuple(x.clone() for x in kv) for k, kv in all_caches(device).items()}, tables, num_tokens,
                       num_new, BLOCK, is_prefill, device)
    for layer, (q, k, v) in enumerate(qkv):
        torch.testing.assert_close(step.attend(layer, q, k, v), reference.attend(layer, q, k, v),
                                   rtol=1e-5, atol=1e-5)
    thread.join()
    assert not errors, errors
    if rank == 0:
        for got, want in zip(mine[DEVICE], moved):
            torch.testing.assert_close(got[:, MOVE[5]], want, rtol=0, atol=0)
    return True


@pytest.mark.parametrize("mode", ["decode", "prefill", "chunked"])
def test_dist_step_on_two_processes_matches_the_local_kv_layer(mode):
    assert run_ranks(one_step, 2, mode, "gloo", backend="gloo")


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="NCCL needs two CUDA devices")
def test_dist_step_over_nccl_matches_the_local_kv_layer():
    assert run_ranks(one_step, 2, "decode", "nccl", backend="nccl")
