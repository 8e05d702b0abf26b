"""Part 3's switches measured in the same run: several prompts prefilled in one step with the varlen FlashAttention
call against one SDPA a prompt (`packed_prefill`), and the MLP's SiLU-mul as the fused Triton kernel against
torch's two pointwise ops (`LlamaModel.with_silu_mul`), in packed prefills and in a decode step (from CUDA graphs
on a GPU). On a CPU both switches leave the same path (varlen and the kernel run on CUDA only): the dry run checks
that the code runs."""
from reference_impl.backends.local import LocalBackend
from reference_impl.calibration.perf_model import InstanceLoad, causal_prefill_pairs, step_time_s
from reference_impl.control.engine import EngineConfig
from reference_impl.control.sequence import Sequence, num_blocks_for
from repro.validate_gpu.step_timing import BLOCK_SIZE, on_instance, prefill_flops, sequences, timed_step_s


def _prompts(lens, vocab: int, rng):
    """Sequences of `lens` tokens and their rBlocks, laid one after another in the cache."""
    seqs, tables, start = [], [], 0
    for i, n in enumerate(lens):
        seqs.append(Sequence(i, rng.integers(0, vocab, n).tolist(), 2))
        blocks = num_blocks_for(n, BLOCK_SIZE)
        tables.append(on_instance(list(range(start, start + blocks))))
        start += blocks
    return seqs, tables


def packed_points(model, size, device, rng, predictor, peak_tf) -> list[dict]:
    """Each set of `size.packed_prefills` prefilled in one step: packed (varlen), one SDPA a prompt, and packed
    with torch's SiLU-mul."""
    blocks = max(sum(num_blocks_for(n, BLOCK_SIZE) for n in lens) for lens in size.packed_prefills)
    config = EngineConfig(1, blocks, block_size=BLOCK_SIZE, max_batch_size=max(map(len, size.packed_prefills)))
    backends = {"packed_s": LocalBackend(model, config, device=device, eager=True),
                "per_prompt_s": LocalBackend(model, config, device=device, eager=True, packed_prefill=False),
                "unfused_s": LocalBackend(model.with_silu_mul("torch"), config, device=device, eager=True)}
    reps = max(1, size.reps - 2)
    points = []
    for lens in size.packed_prefills:
        seqs, tables = _prompts(lens, model.config.vocab_size, rng)
        times = {key: timed_step_s(backend, seqs, tables, True, reps) for key, backend in backends.items()}
        tokens = sum(lens)
        predicted = step_time_s(predictor, InstanceLoad(0, 0, prefill_tokens=tokens, prefill_attn_pairs=sum(
            causal_prefill_pairs(n) for n in lens)))
        tflops = sum(prefill_flops(model.config, n) for n in lens) / times["packed_s"] / 1e12
        points.append({"prompts": len(lens), "prompt_lens": list(lens), "tokens": tokens, **times,
                       "packed_speedup": times["per_prompt_s"] / times["packed_s"],
                       "silu_mul_speedup": times["unfused_s"] / times["packed_s"],
                       "predicted_s": predicted, "ratio": times["packed_s"] / predicted, "tflops": tflops,
                       "tflops_pct_of_peak": None if peak_tf is None else 100 * tflops / peak_tf})
    return points


def silu_mul_decode(model, size, device, rng) -> dict:
    """One decode step of `size.silu_mul_decode` (batch, context), SiLU-mul fused and not (graphs on a GPU)."""
    batch, context = size.silu_mul_decode
    blocks = num_blocks_for(context, BLOCK_SIZE)
    config = EngineConfig(1, batch * blocks, block_size=BLOCK_SIZE, max_batch_size=batch)
    tables = [on_instance(list(range(i * blocks, (i + 1) * blocks))) for i in range(batch)]
    seqs = sequences(batch, context, model.config.vocab_size, rng, True)
    times = {}
    for key, variant in (("fused_s", model), ("unfused_s", model.with_silu_mul("torch"))):
        backend = LocalBackend(variant, config, device=device, graph_max_tokens=context)
        times[key] = timed_step_s(backend, seqs, tables, False, size.reps)
        del backend
    return {"batch": batch, "context": context, **times, "silu_mul_speedup": times["unfused_s"] / times["fused_s"]}
