"""One part of `repro validate-gpu` in a process of its own: `python -m repro.validate_gpu.part NAME SIZE DEVICE
OUT_JSON`. The runner kills it at its time budget; what it wrote before is all that is kept."""
import importlib
import json
import os
import sys
import time
from pathlib import Path

import torch

from repro.validate_gpu.sizes import SIZES

MODULES = {"attention": "attention", "engine": "engine_check", "steps": "steps", "pooling": "pooling",
           "serving": "serving"}


def main(argv: list[str]) -> int:
    name, size_name, device_name, out = argv
    device = torch.device(device_name)
    if device.type == "cpu":
        torch.set_num_threads(1)  # a shared 2-core machine: one thread keeps timings steady
    size = getattr(SIZES[size_name], name)
    start = time.perf_counter()
    result = importlib.import_module(f"repro.validate_gpu.{MODULES[name]}").run(size, device)
    result["part_wall_s"] = time.perf_counter() - start
    tmp = Path(out).with_suffix(".tmp")
    tmp.write_text(json.dumps(result, indent=1, default=str))
    os.replace(tmp, out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
