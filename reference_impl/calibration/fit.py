"""`calibrate`: profile folder (laid out like ../shared/data/profiles) -> coefficient document.

Non-attention time per layer: greedy knots through the per-token-count medians (the rows have real
steps from GEMM tiling, so a smooth law would miss them). Collectives: medians in half-octave bins of
message size (the rows are noisy and bimodal at small sizes; a bin median ignores single outliers), made
non-decreasing by isotonic regression (more bytes never take less time; an optimiser must not find a dip). Attention: KV
bytes over the rate implied by DistServe's decode slope (see `_measured_attention`).
"""
import hashlib
import math
from pathlib import Path

import numpy as np

from reference_impl.calibration import readers
from reference_impl.calibration.curve import Curve, fit_curve, isotonic, relative_errors, round_sig
from reference_impl.calibration.specs import attention_shapes, gpu_entry, gpu_names, model_entry, model_names, model_spec
from reference_impl.errors import InputError
from reference_impl.calibration.links import INTER_NODE, INTRA_NODE

FORMAT = "infinite-llm-repro/calibration/1"
NON_ATTENTION_MAX_REL_ERR = 0.05
NETWORK_BINS_PER_OCTAVE = 2
PROFILE_DTYPE_BYTES = 2  # Vidur and DistServe profiled fp16 models
SEND_RECV_LINKS = {1: INTER_NODE, 2: INTRA_NODE}  # devices_per_node of a 2-worker send/recv
REGENERATE = ("repro calibrate --profiles ../shared/data/profiles "
              "--out reference_impl/calibration/data/vidur_distserve.json")


def binned_curve(xs, ys, bins_per_octave: int = NETWORK_BINS_PER_OCTAVE) -> Curve:
    xs, ys = np.asarray(xs, dtype=float), np.asarray(ys, dtype=float)
    bins = np.floor(np.log2(xs) * bins_per_octave + 1e-9)
    members = [bins == b for b in np.unique(bins)]
    knots_y = isotonic([np.median(ys[m]) for m in members], [m.sum() for m in members])
    return Curve(tuple(float(np.median(xs[m])) for m in members), tuple(round_sig(y) for y in knots_y))


def curve_entry(curve: Curve, xs, ys, source: str) -> dict:
    err = relative_errors(curve, xs, ys)
    return {**curve.to_json(), "rows": len(err), "source": source,
            "max_rel_err": round_sig(float(err.max())), "median_rel_err": round_sig(float(np.median(err))),
            "p90_rel_err": round_sig(float(np.quantile(err, 0.9)))}


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _non_attention(root: Path, sku: str, files: dict) -> dict:
    per_model = {}
    for model in model_names():
        profile = model_entry(model).get("vidur_profile")
        path = root / "vidur" / "compute" / sku / (profile or "") / "mlp.csv"
        if not profile or not path.is_file():
            continue
        spec = model_spec(model)
        per_tp, dims = readers.read_vidur_mlp(path)
        expected = {"n_head": spec.num_heads, "n_kv_head": spec.num_kv_heads, "n_embd": spec.hidden_size,
                    "n_expanded_embd": spec.intermediate_size}
        if dims != expected:
            raise InputError(f"{path} has layer dims {dims}, not {model}'s {expected}")
        rel = path.relative_to(root).as_posix()
        files[rel] = _sha256(path)
        per_model[model] = {str(tp): curve_entry(fit_curve(x, y, max_rel_err=NON_ATTENTION_MAX_REL_ERR), x, y, rel)
                            for tp, (x, y) in sorted(per_tp.items())}
    if not per_model:
        raise InputError(f"no model profiles under {root / 'vidur' / 'compute' / sku}: expected <org>/<model>/mlp.csv")
    return per_model


def _network(root: Path, topology: str, files: dict) -> tuple[dict, dict]:
    folder = root / "vidur" / "network" / topology
    all_reduce, send_recv = {}, {}
    path = folder / "all_reduce.csv"
    rel = path.relative_to(root).as_posix()
    for (workers, per_node), (x, y) in sorted(readers.read_vidur_collective(path, "all_reduce").items()):
        if workers == per_node:  # a TP group stays inside one node
            all_reduce[str(workers)] = curve_entry(binned_curve(x, y), x, y, rel)
    files[rel] = _sha256(path)
    path = folder / "send_recv.csv"
    rel = path.relative_to(root).as_posix()
    for (workers, per_node), (x, y) in sorted(readers.read_vidur_collective(path, "send_recv").items()):
        if workers == 2 and per_node in SEND_RECV_LINKS:
            send_recv[SEND_RECV_LINKS[per_node]] = curve_entry(binned_curve(x, y), x, y, rel)
    files[rel] = _sha256(path)
    return all_reduce, send_recv


def _measured_attention(root: Path, profile: str, hbm_bytes_per_s: float, files: dict) -> dict:
    """KV read rate per GPU = model KV bytes per token / TP / decode slope b (small-batch regime of
    DistServe's own engine); prefill attention FLOP rate = causal attention FLOPs (2 * hidden * n^2 per
    layer) / TP / quadratic term c. The medians over the models and TP degrees of the file are kept."""
    path = root / "distserve" / profile
    fits = readers.read_distserve_fits(path)
    by_name = attention_shapes()
    kv_rates, prefill_rates, samples = [], [], []
    for name, per_tp in sorted(fits.items()):
        if name not in by_name:
            continue
        shape = by_name[name]
        head_dim = shape["hidden"] // shape["num_heads"]
        kv_bytes = 2 * shape["num_kv_heads"] * head_dim * PROFILE_DTYPE_BYTES * shape["num_layers"]
        for tp, (decode_s_per_token, prefill_s_per_token2) in sorted(per_tp.items()):
            kv_rate = kv_bytes / tp / decode_s_per_token
            kv_rates.append(kv_rate)
            if prefill_s_per_token2 > 0:
                prefill_rates.append(2 * shape["hidden"] * shape["num_layers"] / tp / prefill_s_per_token2)
            samples.append({"model": name, "tp": tp, "kv_read_bytes_per_s": round_sig(kv_rate)})
    if not kv_rates:
        raise InputError(f"{path} has no decode fit for a known model ({', '.join(n for n in by_name if n)})")
    rel = path.relative_to(root).as_posix()
    files[rel] = _sha256(path)
    kv_rate = float(np.median(kv_rates))
    distserve_prefill = round_sig(float(np.median(prefill_rates))) if prefill_rates else None
    doc = {"kv_read_bytes_per_s": round_sig(kv_rate), "hbm_fraction": round_sig(kv_rate / hbm_bytes_per_s),
           "source": rel, "samples": samples,
           "derivation": "median over models and TP of KV bytes per token / TP / DistServe small-batch decode slope; "
                         "prefill: causal attention FLOPs / TP / DistServe prefill quadratic term"}
    if distserve_prefill:
        doc["prefill_attn_flops_per_s"] = doc["distserve_prefill_attn_flops_per_s"] = distserve_prefill
    return doc


def _datasheet(gpu: dict) -> dict:
    """A GPU's hardware entries that specs.json gives (the datasheet's memory, HBM rate and node shape)."""
    return {"dtype_bytes": PROFILE_DTYPE_BYTES, "mem_bytes": gpu["mem_gb"] * 1e9,
            "hbm_bytes_per_s": gpu["hbm_gb_s"] * 1e9, "gpus_per_node": gpu["gpus_per_node"]}


def _published_prefill(attention: dict, gpu: dict) -> dict:
    """Prefill attention from the GPU's published/measured rate in specs.json where there is one (a better
    determined number than a quadratic fit term); the fitted value stays beside it for sensitivity runs."""
    if "prefill_attn_tflops" not in gpu:
        return attention
    return {**attention, "prefill_attn_flops_per_s": gpu["prefill_attn_tflops"] * 1e12,
            "prefill_attn_source": gpu["prefill_attn_source"]}


def _derived_attention(reference: dict, reference_gpu: str, gpu: dict) -> dict:
    ref = gpu_entry(reference_gpu)
    return {"kv_read_bytes_per_s": round_sig(reference["hbm_fraction"] * gpu["hbm_gb_s"] * 1e9),
            "prefill_attn_flops_per_s": round_sig(reference["prefill_attn_flops_per_s"]
                                                  * gpu["bf16_dense_tflops"] / ref["bf16_dense_tflops"]),
            "hbm_fraction": reference["hbm_fraction"], "source": reference["source"],
            "derivation": f"no decode profile for this GPU: {reference_gpu}'s measured fraction of HBM bandwidth "
                          "times this GPU's datasheet HBM bandwidth; prefill scaled by datasheet bf16 FLOP/s"}


def calibrate(profiles_dir) -> dict:
    """Fit every GPU whose Vidur compute profiles are in `profiles_dir`; returns the coefficient document."""
    root = Path(profiles_dir)
    if not root.is_dir():
        raise InputError(f"profiles folder {root} does not exist (expected the layout of data/profiles: "
                         "vidur/compute, vidur/network, distserve)")
    files: dict[str, str] = {}
    hardware = {}
    measured_attention = None
    for name in gpu_names():
        gpu = gpu_entry(name)
        if not (root / "vidur" / "compute" / gpu["vidur_sku"]).is_dir():
            continue
        all_reduce, send_recv = _network(root, gpu["vidur_network"], files)
        hardware[name] = {
            **_datasheet(gpu), "non_attention_s": _non_attention(root, gpu["vidur_sku"], files),
            "all_reduce_s": all_reduce, "send_recv_s": send_recv,
        }
        if "distserve_profile" in gpu:
            hardware[name]["attention"] = _measured_attention(
                root, gpu["distserve_profile"], gpu["hbm_gb_s"] * 1e9, files)
            measured_attention = measured_attention or (name, hardware[name]["attention"])
            hardware[name]["attention"] = _published_prefill(hardware[name]["attention"], gpu)
    if not hardware:
        raise InputError(f"no Vidur compute profiles under {root / 'vidur' / 'compute'} "
                         f"(expected a folder per GPU: {', '.join(gpu_entry(g)['vidur_sku'] for g in gpu_names())})")
    for name, entry in hardware.items():
        if "attention" not in entry:
            if measured_attention is None:
                raise InputError(f"no DistServe decode profile under {root / 'distserve'} to derive attention from")
            entry["attention"] = _published_prefill(
                _derived_attention(measured_attention[1], measured_attention[0], gpu_entry(name)), gpu_entry(name))
    sources = {name: readers.read_source_note(root / name / "SOURCE.txt") for name in ("vidur", "distserve")}
    return {"format": FORMAT, "generated_by": "repro calibrate", "hardware": hardware,
            "files_sha256": dict(sorted(files.items())), "sources": sources,
            "fit": {"non_attention": f"greedy knots through per-token medians, max rel err {NON_ATTENTION_MAX_REL_ERR}",
                    "network": f"medians in 1/{NETWORK_BINS_PER_OCTAVE}-octave bins of message bytes, isotonic",
                    "spec_source": "reference_impl/calibration/specs.json"}}


def datasheet_drift(doc: dict) -> list[str]:
    """What `calibrate` takes or derives from specs.json, recomputed for calibration `doc` from specs.json and the
    profile fits `doc` holds: one line per value that differs (beyond the 6 significant digits kept). Empty when
    `doc` is what `calibrate` would write today (regenerate it with REGENERATE when not)."""
    lines, reference = [], None
    for name in [g for g in gpu_names() if g in doc["hardware"]]:
        gpu, hw = gpu_entry(name), doc["hardware"][name]
        lines += _differences(name, hw, {**hw, **_datasheet(gpu)})
        attention = hw["attention"]
        if "distserve_profile" in gpu:  # the fitted entry, before specs.json's prefill rate replaced the fit's
            published = ("prefill_attn_source", "prefill_attn_flops_per_s")
            fitted = {k: v for k, v in attention.items() if k not in published}
            if "distserve_prefill_attn_flops_per_s" in attention:
                fitted["prefill_attn_flops_per_s"] = attention["distserve_prefill_attn_flops_per_s"]
            fitted["hbm_fraction"] = round_sig(fitted["kv_read_bytes_per_s"] / (gpu["hbm_gb_s"] * 1e9))
            reference = reference or (name, fitted)
            want = _published_prefill(fitted, gpu)
        elif reference is not None:
            want = _published_prefill(_derived_attention(reference[1], reference[0], gpu), gpu)
        else:
            continue
        lines += _differences(f"{name} attention", attention, want)
    return lines


def _differences(where: str, got: dict, want: dict) -> list[str]:
    def same(a, b) -> bool:
        if isinstance(a, (int, float)) and isinstance(b, (int, float)):
            return math.isclose(a, b, rel_tol=1e-5)
        return a == b
    return [f"{where} {key}: {got.get(key)!r} in the calibration, {want.get(key)!r} from specs.json"
            for key in sorted(set(got) | set(want)) if not same(got.get(key), want.get(key))]
