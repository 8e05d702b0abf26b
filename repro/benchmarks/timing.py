"""Wall-clock timing of a callable on CPU or GPU, and the memory bandwidth a plain copy reaches."""
import statistics
import time
from collections.abc import Callable

import torch

# HBM peak bandwidth per GPU, GB/s: vendor datasheets (as collected in the project's hardware facts).
GPU_PEAK_GB_S = {"A100": 2039.0, "H100": 3352.0, "H200": 4800.0}


def time_call_s(fn: Callable[[], object], device: torch.device, *, warmup: int = 2, reps: int = 5) -> float:
    """Median seconds of fn() over reps runs, after warmup runs."""
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(reps):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            samples.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            fn()
            samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def time_graph_replay_s(fn: Callable[[], object], device: torch.device, *, warmup: int = 3, reps: int = 20) -> float:
    """Median seconds of one replay of fn() captured in a CUDA graph: the device time without the host's
    launch overhead, as a serving engine that replays captured decode steps sees it."""
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for _ in range(warmup):
            fn()
    torch.cuda.current_stream(device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return time_call_s(graph.replay, device, warmup=warmup, reps=reps)


def copy_bandwidth_gb_s(device: torch.device, num_bytes: int = 256 * 2**20) -> float:
    """Bytes read plus bytes written per second by a large tensor copy on this device."""
    src = torch.empty(num_bytes, dtype=torch.uint8, device=device).fill_(1)
    dst = torch.empty_like(src)
    seconds = time_call_s(lambda: dst.copy_(src), device, warmup=2, reps=7)
    return 2 * num_bytes / seconds / 1e9


def peak_bandwidth_gb_s(device: torch.device) -> tuple[float, str]:
    """The device's peak memory bandwidth and where the number comes from."""
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        for key, gb_s in GPU_PEAK_GB_S.items():
            if key in name:
                return gb_s, f"{key} datasheet HBM peak"
        return copy_bandwidth_gb_s(device), f"measured copy bandwidth ({name} not in the datasheet table)"
    return copy_bandwidth_gb_s(device), "measured memcpy bandwidth (read + write)"
