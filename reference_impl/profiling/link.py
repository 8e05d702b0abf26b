"""The data plane's link on the machine at hand: one-way time of a torch.distributed point-to-point message
between two processes (gloo over local TCP on CPU), as the Ray backend's instances exchange DistAttention's
queries, `(out, lse)` and KV blocks (backends/ray/dataplane.py).

Two fresh processes (ranks) ping-pong a float32 tensor of each size (isend/irecv, as the engine posts them); one way is half
the round trip's median. The curve goes in a calibration document as a `send_recv_s` link the cost model reads by
name (`links.GLOO`), beside `repro profile`'s "intra-node" memcpy.
"""
import json
import os
import socket
import subprocess
import sys
import time
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist

from reference_impl.calibration.curve import fit_curve
from reference_impl.calibration.fit import curve_entry
from reference_impl.calibration.links import GLOO

SIZES_BYTES = (256, 4096, 32768, 262144, 1 << 20)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank(rank: int, port: int, sizes: list[int], repeats: int) -> list[float]:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2,
                            timeout=timedelta(seconds=60))
    try:
        peer, out = 1 - rank, []
        for size in sizes:
            buf = torch.zeros(max(1, size // 4))
            rtts = []
            for i in range(repeats + 2):  # two warm-up round trips
                t0 = time.perf_counter()
                if rank == 0:
                    dist.isend(buf, peer, tag=i).wait()
                    dist.irecv(buf, peer, tag=i).wait()
                else:
                    dist.irecv(buf, peer, tag=i).wait()
                    dist.isend(buf, peer, tag=i).wait()
                rtts.append(time.perf_counter() - t0)
            out.append(float(np.median(rtts[2:])) / 2)
        return out
    finally:
        dist.destroy_process_group()


def measure_link(sizes: tuple = SIZES_BYTES, repeats: int = 31, timeout_s: float = 120.0) -> tuple[list[int], list[float]]:
    """(message sizes in bytes, one-way seconds) between two local gloo ranks (two fresh processes)."""
    port = _free_port()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", __name__, str(port), ",".join(map(str, sizes)), str(repeats)]
    procs = [subprocess.Popen([*cmd, str(rank)], stdout=subprocess.PIPE, text=True, env=env) for rank in (0, 1)]
    try:
        outs = [p.communicate(timeout=timeout_s)[0] for p in procs]
    finally:
        for p in procs:
            p.kill()
    if any(p.returncode for p in procs):
        raise RuntimeError(f"the gloo link measurement failed (exit codes {[p.returncode for p in procs]})")
    return list(sizes), json.loads(outs[0])


def add_link(doc: dict, sizes: list[int], times_s: list[float], source: str) -> dict:
    """`doc` (a calibration document of one hardware entry) with the measured link as `links.GLOO`."""
    (hardware,) = doc["hardware"].values()
    hardware["send_recv_s"][GLOO] = curve_entry(fit_curve(sizes, times_s, max_rel_err=0.05), sizes, times_s,
                                                     source)
    return doc


if __name__ == "__main__":  # one rank of measure_link: PORT SIZES REPEATS RANK
    port_arg, sizes_arg, repeats_arg, rank_arg = sys.argv[1:5]
    print(json.dumps(_rank(int(rank_arg), int(port_arg), [int(x) for x in sizes_arg.split(",")], int(repeats_arg))))
