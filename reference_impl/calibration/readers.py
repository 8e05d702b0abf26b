"""Readers for the profile folder layout of ../shared/data/profiles (Vidur CSVs, DistServe JSON).

Each reader returns plain numbers in SI units (seconds, bytes) and raises InputError naming the file
when something it needs is missing.
"""
import csv
import json
from collections import defaultdict
from pathlib import Path

from reference_impl.errors import InputError

# One decoder layer's non-attention ops as Vidur sums them (its ExecutionTime: attention pre/post
# projections, rope, both norms, the MLP and the residual add); `emb` runs once per model, not per layer.
NON_ATTENTION_OPS = ("input_layernorm", "attn_pre_proj", "attn_rope", "attn_post_proj",
                     "post_attention_layernorm", "mlp_up_proj", "mlp_act", "mlp_down_proj", "add")
LAYER_DIM_COLUMNS = ("n_head", "n_kv_head", "n_embd", "n_expanded_embd")
MS = 1e-3


def _read_csv(path: Path, needed: list[str]) -> list[dict]:
    if not path.is_file():
        raise InputError(f"missing profile file {path}")
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in needed if c not in (reader.fieldnames or [])]
        if missing:
            raise InputError(f"{path} lacks the columns {', '.join(missing)}")
        rows = list(reader)
    if not rows:
        raise InputError(f"{path} has no rows")
    return rows


def _number(row: dict, column: str, path: Path) -> float:
    try:
        return float(row[column])
    except (TypeError, ValueError):
        raise InputError(f"{path}: column {column} holds {row[column]!r}, not a number") from None


def read_vidur_mlp(path: Path) -> tuple[dict[int, tuple[list[int], list[float]]], dict[str, int]]:
    """Per TP degree: (num_tokens, non-attention seconds of one layer); plus the layer dims of the rows."""
    time_cols = [f"time_stats.{op}.median" for op in NON_ATTENTION_OPS]
    rows = _read_csv(path, time_cols + list(LAYER_DIM_COLUMNS) + ["num_tokens", "num_tensor_parallel_workers"])
    dims = {c: int(_number(rows[0], c, path)) for c in LAYER_DIM_COLUMNS}
    per_tp: dict[int, tuple[list[int], list[float]]] = defaultdict(lambda: ([], []))
    for row in rows:
        if {c: int(_number(row, c, path)) for c in LAYER_DIM_COLUMNS} != dims:
            raise InputError(f"{path} mixes rows of different layer shapes")
        tokens, times = per_tp[int(_number(row, "num_tensor_parallel_workers", path))]
        tokens.append(int(_number(row, "num_tokens", path)))
        times.append(sum(_number(row, c, path) for c in time_cols) * MS)
    return dict(per_tp), dims


def read_vidur_collective(path: Path, collective: str) -> dict[tuple[int, int], tuple[list[float], list[float]]]:
    """Per (num_workers, devices_per_node): (message bytes, median seconds)."""
    time_col = f"time_stats.{collective}.median"
    rows = _read_csv(path, [time_col, "num_workers", "devices_per_node", "size"])
    groups: dict[tuple[int, int], tuple[list[float], list[float]]] = defaultdict(lambda: ([], []))
    for row in rows:
        key = (int(_number(row, "num_workers", path)), int(_number(row, "devices_per_node", path)))
        sizes, times = groups[key]
        sizes.append(_number(row, "size", path))
        times.append(_number(row, time_col, path) * MS)
    return dict(groups)


def read_distserve_fits(path: Path) -> dict[str, dict[int, tuple[float, float]]]:
    """Per model and TP degree: (small-batch decode slope b in s per context token, prefill quadratic
    term c in s per token^2).

    DistServe fits, over all layers, a decode step as a + b * sum(context_len + 1) + c' * batch and a
    prefill as a + b' * sum_len + c * sum_len^2, in ms.
    """
    if not path.is_file():
        raise InputError(f"missing profile file {path}")
    try:
        doc = json.loads(path.read_text())
        return {model: {int(tp): (float(fit["decoding_smallbs"][1]) * MS, float(fit["prefill"][2]) * MS)
                        for tp, fit in per_tp.items()}
                for model, per_tp in doc.items()}
    except (ValueError, KeyError, TypeError, IndexError, AttributeError):
        raise InputError(f"{path} is not a DistServe profile (model -> tp -> prefill/decoding_smallbs [a, b, c])") from None


def read_source_note(path: Path) -> str:
    return path.read_text().strip() if path.is_file() else ""
