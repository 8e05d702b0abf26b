"""Run a function on N real processes joined by torch.distributed (gloo on CPU, NCCL on GPUs).

Rank 0's return value comes back to the caller through a pickle file; the group is torn down after.
"""
import os
import pickle
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from reference_impl.errors import InputError


def pick_backend(world_size: int) -> str:
    """NCCL when there is a CUDA device per rank, else gloo."""
    if torch.cuda.is_available() and torch.cuda.device_count() >= world_size and dist.is_nccl_available():
        return "nccl"
    return "gloo"


def rank_device(backend: str, rank: int) -> torch.device:
    return torch.device(f"cuda:{rank}") if backend == "nccl" else torch.device("cpu")


def _worker(rank, world_size, backend, store_path, out_path, fn, args):
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // world_size))
    if backend == "nccl":
        torch.cuda.set_device(rank)
    dist.init_process_group(backend, init_method=f"file://{store_path}", rank=rank, world_size=world_size)
    try:
        result = fn(rank, world_size, rank_device(backend, rank), *args)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    if rank == 0:
        Path(out_path).write_bytes(pickle.dumps(result))


def run_ranks(fn, world_size: int, *args, backend: str | None = None):
    """Call fn(rank, world_size, device, *args) on `world_size` spawned processes; returns rank 0's result.

    `fn` must be a module-level function (spawned processes import it)."""
    if world_size < 1:
        raise InputError(f"world size must be >= 1 (got {world_size})")
    backend = backend or pick_backend(world_size)
    with tempfile.TemporaryDirectory(prefix="dist-") as tmp:
        store, out = os.path.join(tmp, "store"), os.path.join(tmp, "result.pkl")
        # fork reuses this process's imports (seconds saved per rank); CUDA needs spawn
        method = "spawn" if backend == "nccl" else "fork"
        mp.start_processes(_worker, args=(world_size, backend, store, out, fn, args), nprocs=world_size,
                           join=True, start_method=method)
        return pickle.loads(Path(out).read_bytes())
