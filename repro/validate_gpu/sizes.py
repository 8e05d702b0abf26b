"""What each part measures on a GPU, and the toy sizes of the CPU dry run."""
from dataclasses import dataclass

from repro.attention.cli import DTYPES, LAYOUTS


@dataclass(frozen=True, slots=True)
class AttentionSize:
    check_lengths: tuple[int, ...]
    check_head_dim: int
    check_cases: tuple[tuple[str, str, str], ...]  # (backend, dtype, layout)
    bench_models: tuple[str, ...]
    bench_contexts: tuple[int, ...]
    bench_batches: tuple[int, ...]
    bench_max_kv_gib: float
    bench_dtype: str


@dataclass(frozen=True, slots=True)
class ModelShape:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int


@dataclass(frozen=True, slots=True)
class EngineCheckSize:
    shape: ModelShape
    prompt_lens: tuple[int, ...]
    new_tokens: int
    block_size: int
    spill_instances: int
    spill_blocks_per_instance: int


@dataclass(frozen=True, slots=True)
class StepsSize:
    model: str  # calibration/specs.json name of the shape that runs (random weights)
    num_layers: int | None  # None: all of the model's layers
    dtype: str
    batches: tuple[int, ...]
    contexts: tuple[int, ...]
    prefill_lens: tuple[int, ...]
    max_kv_gib: float  # KV allocated for the decode grid (points beyond it are skipped)
    reps: int
    packed_prefills: tuple[tuple[int, ...], ...]  # prompt lengths prefilled together in one step
    silu_mul_decode: tuple[int, int]  # (batch, context) of the decode step timed with SiLU-mul fused and not


@dataclass(frozen=True, slots=True)
class PoolingSize:
    shape: ModelShape
    dtype: str
    num_requests: int
    prompt_len: int
    new_tokens: int
    instances: tuple[int, ...]  # instance counts whose budgets force KV onto the others
    block_size: int


@dataclass(frozen=True, slots=True)
class ServingSize:
    model: str
    dtype: str
    trace: int
    num_requests: int
    max_tokens: int
    max_batch_size: int
    multipliers: tuple[float, ...]  # of the measured saturation rate
    quick_profile: bool


@dataclass(frozen=True, slots=True)
class Sizes:
    name: str
    budgets_s: dict  # part -> seconds
    attention: AttentionSize
    engine: EngineCheckSize
    steps: StepsSize
    pooling: PoolingSize
    serving: ServingSize


# `repro attention check`'s grid: both backends, every dtype and head layout
ALL_CHECK_CASES = tuple((b, d, lay) for b in ("triton", "torch") for d in DTYPES for lay in LAYOUTS)
SMALL_GQA = ModelShape(vocab_size=512, hidden_size=256, intermediate_size=688, num_layers=4, num_heads=8,
                       num_kv_heads=2)
POOL_SHAPE = ModelShape(vocab_size=4096, hidden_size=1024, intermediate_size=2752, num_layers=8, num_heads=16,
                        num_kv_heads=4)
TOY = ModelShape(vocab_size=128, hidden_size=32, intermediate_size=64, num_layers=2, num_heads=4, num_kv_heads=2)

# What the figures simulate, and so what every measured step and serving run is set against.
COMMITTED_MODEL = "llama2-7b"
COMMITTED_GPU = "H100-SXM"

# One H100/H200: at most 7.1 minutes of parts, inside the 8 (process starts and CUDA contexts included).
GPU = Sizes(
    name="gpu",
    budgets_s={"attention": 90, "engine": 45, "steps": 100, "pooling": 40, "serving": 150},
    attention=AttentionSize(check_lengths=(1, 17, 97, 1000, 4133), check_head_dim=128, check_cases=ALL_CHECK_CASES,
                            bench_models=("llama2-7b", "llama2-70b"), bench_contexts=(32768,),
                            bench_batches=(4, 32), bench_max_kv_gib=20.0, bench_dtype="bfloat16"),
    engine=EngineCheckSize(shape=SMALL_GQA, prompt_lens=(12, 37, 64, 101), new_tokens=48, block_size=4,
                           spill_instances=3, spill_blocks_per_instance=40),
    steps=StepsSize(model="llama2-7b", num_layers=None, dtype="float16", batches=(1, 4, 16, 64),
                    contexts=(1024, 4096, 16384), prefill_lens=(512, 1024, 2048, 4096, 8192), max_kv_gib=40.0,
                    reps=5, packed_prefills=((512,) * 8, (64,) * 32, (100, 900, 2000, 300, 700)),
                    silu_mul_decode=(16, 1024)),
    pooling=PoolingSize(shape=POOL_SHAPE, dtype="float32", num_requests=8, prompt_len=192, new_tokens=48,
                        instances=(2, 4), block_size=16),
    serving=ServingSize(model="llama2-7b", dtype="float16", trace=1, num_requests=20, max_tokens=512,
                        max_batch_size=16, multipliers=(0.4, 1.0, 2.0), quick_profile=False),
)

# The CPU dry run of `make test`: every code path at toy sizes (Triton in its interpreter), in about a minute.
DRY = Sizes(
    name="dry-run",
    budgets_s={"attention": 120, "engine": 60, "steps": 90, "pooling": 60, "serving": 150},
    attention=AttentionSize(check_lengths=(1, 17, 40), check_head_dim=32,
                            check_cases=(("triton", "float32", "GQA"), ("torch", "bfloat16", "MQA")),
                            bench_models=("llama2-7b",), bench_contexts=(256,), bench_batches=(1,),
                            bench_max_kv_gib=0.1, bench_dtype="float32"),
    engine=EngineCheckSize(shape=TOY, prompt_lens=(5, 11), new_tokens=12, block_size=4, spill_instances=3,
                           spill_blocks_per_instance=5),
    steps=StepsSize(model="llama-tiny", num_layers=2, dtype="float32", batches=(1, 4), contexts=(64, 256),
                    prefill_lens=(32, 128), max_kv_gib=0.05, reps=2, packed_prefills=((16, 40, 8),),
                    silu_mul_decode=(4, 64)),
    pooling=PoolingSize(shape=TOY, dtype="float32", num_requests=3, prompt_len=24, new_tokens=8,
                        instances=(2, 3), block_size=4),
    serving=ServingSize(model="llama-tiny", dtype="float32", trace=1, num_requests=6, max_tokens=48,
                        max_batch_size=4, multipliers=(0.5, 2.0), quick_profile=True),
)

SIZES = {s.name: s for s in (GPU, DRY)}
DEADLINE_ENV = "VALIDATE_GPU_DEADLINE"  # time.time() by which a part must be done, set by the runner
PARTS = ("attention", "engine", "steps", "pooling", "serving")
