"""How the papers' vLLM baselines translate into real vLLM engines (EngineArgs keyword arguments).

vLLM-M: `num_devices // tp` independent engines of `tp` devices each, fed by most-free-memory dispatch.
vLLM-S: one engine holding all devices, tensor parallel inside a node and pipeline parallel across nodes.
"""
from dataclasses import dataclass

from reference_impl.errors import InputError

POLICIES = ("vllm-m", "vllm-s")
DEVICES = ("cpu", "cuda")


@dataclass(frozen=True, slots=True)
class VllmSetup:
    policy: str = "vllm-m"
    num_devices: int = 1  # GPUs in all (on CPU: engines of vLLM-M, each on the CPU)
    tp: int = 1  # vLLM-M: tensor parallel size of each engine (vLLM-S derives its own layout)
    gpus_per_node: int = 8
    block_size: int = 32  # tokens per KV block (vLLM 0.32's CPU attention takes multiples of 32 only)
    blocks_per_engine: int | None = None  # usable KV blocks of each engine; None: vLLM sizes it from memory
    max_model_len: int = 2048
    max_num_seqs: int = 64
    dtype: str = "float32"
    device: str = "cpu"
    cpu_kvcache_gb: int = 1  # VLLM_CPU_KVCACHE_SPACE of each engine on CPU
    cpu_threads: int | None = None  # CPU: bind each engine's OpenMP threads to cores 0..n-1; None: vLLM's "auto"
    seed: int = 0

    def __post_init__(self):
        if self.policy not in POLICIES:
            raise InputError(f"unknown vLLM policy {self.policy!r}; choose one of {', '.join(POLICIES)}")
        if self.device not in DEVICES:
            raise InputError(f"unknown device {self.device!r}; choose one of {', '.join(DEVICES)}")
        if min(self.num_devices, self.tp, self.gpus_per_node, self.block_size, self.max_model_len,
               self.max_num_seqs, self.cpu_kvcache_gb) < 1:
            raise InputError("vLLM setup counts (devices, tp, block size, max model length, max seqs) must be >= 1")
        if self.cpu_threads is not None and self.cpu_threads < 1:
            raise InputError(f"cpu threads must be >= 1, got {self.cpu_threads}")
        if self.blocks_per_engine is not None and self.blocks_per_engine * self.block_size < self.max_model_len:
            raise InputError(f"{self.blocks_per_engine} KV blocks of {self.block_size} tokens hold less than the max "
                             f"model length {self.max_model_len} (vLLM refuses that); lower it or add blocks")
        if self.policy == "vllm-m" and self.num_devices % self.tp:
            raise InputError(f"vLLM-M: {self.num_devices} devices do not split into engines of tp={self.tp}")
        if self.policy == "vllm-m" and self.tp > self.gpus_per_node:
            raise InputError(f"vLLM-M: tp={self.tp} does not fit a node of {self.gpus_per_node} devices")
        if self.policy == "vllm-s" and self.num_devices > self.gpus_per_node and self.num_devices % self.gpus_per_node:
            raise InputError(f"vLLM-S: {self.num_devices} devices are not whole nodes of {self.gpus_per_node}")

    @property
    def layouts(self) -> list[tuple[int, int]]:
        """(tensor parallel, pipeline parallel) of each engine."""
        if self.policy == "vllm-s":
            tp = min(self.num_devices, self.gpus_per_node)
            return [(tp, self.num_devices // tp)]
        return [(self.tp, 1)] * (self.num_devices // self.tp)


def engine_kwargs(setup: VllmSetup, model_dir: str) -> list[dict]:
    """EngineArgs keyword arguments of each engine of `setup`, serving the Hugging Face folder `model_dir`."""
    engines = []
    for tp, pp in setup.layouts:
        kwargs = {
            "model": str(model_dir),
            "skip_tokenizer_init": True,  # prompts arrive as token ids; tiny test models have no tokenizer
            "dtype": setup.dtype,
            "seed": setup.seed,
            "tensor_parallel_size": tp,
            "pipeline_parallel_size": pp,
            "block_size": setup.block_size,
            "max_model_len": setup.max_model_len,
            "max_num_seqs": setup.max_num_seqs,
            "max_num_batched_tokens": max(setup.max_model_len, 2048),
            "enable_prefix_caching": False,  # our engine has none; workloads with shared prefixes would differ
            "disable_log_stats": True,
        }
        if setup.blocks_per_engine is not None:  # vLLM's block pool keeps one block aside as its null block
            kwargs["num_gpu_blocks_override"] = setup.blocks_per_engine + 1
        if setup.device == "cpu":
            kwargs["enforce_eager"] = True  # no graph capture or compile on CPU: startup in seconds
        if tp * pp > 1:
            kwargs["distributed_executor_backend"] = "mp" if pp == 1 or setup.device == "cpu" else "ray"
        engines.append(kwargs)
    return engines


def engine_env(setup: VllmSetup) -> dict[str, str]:
    """Environment variables the vLLM process needs for `setup`."""
    if setup.device != "cpu":
        return {}
    env = {"VLLM_CPU_KVCACHE_SPACE": str(setup.cpu_kvcache_gb), "VLLM_TARGET_DEVICE": "cpu"}
    ranks = max(tp * pp for tp, pp in setup.layouts)
    if setup.cpu_threads is not None or ranks > 1:
        # vLLM's "auto" binding wants a NUMA node per TP/PP rank; a one-node machine needs the cores named per rank
        per_rank = setup.cpu_threads or 1
        env["VLLM_CPU_OMP_THREADS_BIND"] = "|".join(
            str(r * per_rank) if per_rank == 1 else f"{r * per_rank}-{(r + 1) * per_rank - 1}" for r in range(ranks))
    return env


def dispatch_capacity_blocks(setup: VllmSetup) -> int:
    """KV blocks the dispatcher assumes per engine: the override, else what max_model_len needs at full batch."""
    if setup.blocks_per_engine is not None:
        return setup.blocks_per_engine
    return -(-setup.max_model_len // setup.block_size) * setup.max_num_seqs
