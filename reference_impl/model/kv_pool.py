"""The KV pool sized from the device memory left after a warm-up of the largest prefill (GPU only).

blocks = (total memory x fraction - memory in use - the warm-up's activation peak) / bytes of one rBlock (K and V
of every layer), shared by the instances on the device (each also holds its CPU-tier blocks there)."""
import torch

from reference_impl.errors import InputError
from reference_impl.model.prompt_attention import causal_attention


def block_bytes(model, block_size: int) -> int:
    c = model.config
    return 2 * c.num_layers * block_size * c.num_kv_heads * c.head_dim * model.dtype.itemsize


@torch.inference_mode()
def device_blocks_per_instance(model, config, device, fraction: float = 0.9, warmup_tokens: int = 8192) -> int:
    """Device-tier rBlocks per instance that fit in `fraction` of `device`'s memory with the model loaded."""
    if not 0 < fraction <= 1:
        raise InputError(f"gpu_memory_utilization must be in (0, 1], got {fraction}")
    device = torch.device(device)
    torch.cuda.synchronize(device)
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(device)
    ids = torch.zeros(warmup_tokens, dtype=torch.int64, device=device)
    hidden = model.forward(ids, torch.arange(warmup_tokens, device=device), lambda layer, q, k, v: causal_attention(q, k, v))
    model.logits(hidden[-1:])
    torch.cuda.synchronize(device)
    free, total = torch.cuda.mem_get_info(device)
    activations = torch.cuda.max_memory_allocated(device) - torch.cuda.memory_allocated(device)
    room = total * fraction - (total - free) - activations
    blocks = int(room // block_bytes(model, config.block_size)) // config.num_instances - config.cpu_blocks_per_instance
    if blocks < 1:
        raise InputError(f"no room for the KV pool: {fraction:.0%} of {total / 2**30:.1f} GiB leaves "
                         f"{room / 2**30:.2f} GiB after the model and a {warmup_tokens}-token prefill")
    return blocks
