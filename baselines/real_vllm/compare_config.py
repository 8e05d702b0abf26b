"""What `repro compare-vllm` compares (no heavy imports: its `--help` reads the defaults)."""
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class CompareConfig:
    model: str = "tiny"  # 'tiny' (TINY_VLLM, random from seed, saved as a Hugging Face folder) or a LLaMA folder
    trace_id: int = 2  # infinite-llm Table 1 trace whose lengths are used (fitted source, no download)
    num_requests: int = 8
    max_prompt_len: int = 256  # lengths are clipped to these so the tiny CPU run takes seconds
    max_output_len: int = 32
    block_size: int = 32  # vLLM's CPU attention needs a multiple of 32; our engine runs the same size
    max_batch_size: int = 64
    cpu_threads: int = 1  # torch threads of our engine = OpenMP threads vLLM binds (its CPU default on 2 cores)
    seed: int = 0
