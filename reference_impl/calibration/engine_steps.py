"""Another engine's cost model from its measured step times (real vLLM timed from outside, the Ray engine from its
loops' counters), in the calibration format.

The op-level profile of this machine (profile_local.py: one layer's non-attention ops, prefill attention) is kept;
two terms are replaced by what the engine's own steps show:

    KV read rate   slope of decode step time against the KV tokens the simulator counts (blocks in use x block
                   size), over decode steps of one batch size at several contexts: the engine's attention
    step overhead  step time minus the layer terms (with that KV rate), per batch size (decode) and per step's
                   prompt tokens (prefill), as in profile_overhead.py for our engine, through the medians at each
                   point: the engine's scheduling, its LM head and sampling, its IPC, and whatever its kernels cost
                   beyond the profiled ops (floored at ~0 where its kernels are faster than the profiled ops)
"""
import copy
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from reference_impl.calibration.coefficients import dumps
from reference_impl.calibration.curve import round_sig
from reference_impl.calibration.model import CalibratedPerfModel
from reference_impl.calibration.overhead import median_curve_entry
from reference_impl.calibration.specs import model_spec
from reference_impl.calibration.perf_model import InstanceLoad, causal_prefill_pairs, step_time_s

@dataclass(frozen=True, slots=True)
class DecodeStep:
    batch_size: int
    kv_tokens: int  # what the simulator counts: KV blocks in use x block size
    step_s: float


@dataclass(frozen=True, slots=True)
class PrefillStep:
    num_prompts: int
    prompt_len: int
    step_s: float


def kv_read_bytes_per_s(steps: list[DecodeStep], num_layers: int, kv_bytes_per_token_layer: float) -> float | None:
    """The attention's KV read rate from decode steps at one batch size; None where time does not grow with KV."""
    kv = np.array([s.kv_tokens for s in steps], dtype=float)
    if len(steps) < 2 or np.ptp(kv) == 0:
        return None
    slope = np.polyfit(kv, [s.step_s for s in steps], 1)[0]
    return float(num_layers * kv_bytes_per_token_layer / slope) if slope > 0 else None


def fit_engine_steps(ops_doc: dict, hardware: str, model: str, decode: list[DecodeStep], prefill: list[PrefillStep],
                     *, kv_batch: int | None, engine: str, source: str) -> dict:
    """`ops_doc` (a `repro profile` document of this machine) with the KV read rate and the step overhead of
    `engine` fitted to its measured steps; `kv_batch`: the batch size whose steps span several contexts (None: no
    step spans several, the op-level KV read rate is kept)."""
    spec = model_spec(model)
    doc = copy.deepcopy(ops_doc)
    hw = doc["hardware"][hardware]
    hw.setdefault("step_overhead_s", {}).pop(model, None)
    attention = hw["attention"]
    kv_bytes = 2 * spec.num_kv_heads * spec.head_dim * hw["dtype_bytes"]
    rate = None if kv_batch is None else kv_read_bytes_per_s([s for s in decode if s.batch_size == kv_batch],
                                                             spec.num_layers, kv_bytes)
    kv_note = (f"{engine}'s decode steps at batch {kv_batch}: slope of step time vs KV tokens" if rate is not None else
               f"{engine}'s decode steps were taken at one context: the op-level rate is kept" if kv_batch is None else
               f"{engine}'s decode steps did not grow with KV at batch {kv_batch}: the op-level rate is kept")
    if rate is not None:
        attention["kv_read_bytes_per_s"] = round_sig(rate)
    attention["derivation"] = f"kv_read_bytes_per_s: {kv_note}; the rest: {attention['derivation']}"
    layers = op_level_model(doc, model, hardware)
    decode_x = [s.batch_size for s in decode]
    decode_y = [s.step_s - step_time_s(layers, InstanceLoad(s.batch_size, s.kv_tokens)) for s in decode]
    prefill_x = [s.num_prompts * s.prompt_len for s in prefill]
    prefill_y = [s.step_s - step_time_s(layers, InstanceLoad(0, 0, prefill_tokens=s.num_prompts * s.prompt_len,
                                                              prefill_attn_pairs=s.num_prompts
                                                              * causal_prefill_pairs(s.prompt_len)))
                 for s in prefill]
    hw["step_overhead_s"][model] = {
        "decode": median_curve_entry(decode_x, decode_y, source),
        "prefill": median_curve_entry(prefill_x, prefill_y, source),
        "derivation": f"{engine}'s own steps ({source}): step time minus this file's layer terms; decode "
                      f"over batch sizes {sorted(set(decode_x))}, prefill over prompt tokens {sorted(set(prefill_x))}"}
    doc["profile"]["engine"] = engine
    return doc


def op_level_model(doc: dict, model: str, hardware: str) -> CalibratedPerfModel:
    """The cost model of the op-level measurements in `doc` (no step overhead yet)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "ops.json"
        path.write_text(dumps(doc))
        return CalibratedPerfModel.for_setting(model=model, gpu=hardware, link="intra-node", coefficients_path=path)
