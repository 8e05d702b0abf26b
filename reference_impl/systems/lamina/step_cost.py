"""What a Lamina decode step costs (lamina 4.2, 5.1), shared by the design's backend and the lamina experiment's
arithmetic. Three stages, each on its own devices:

- compute: every layer but attention on the compute devices, the calibrated step model without attention;
- network: per layer, q, k, v of each request out to the memory devices and the attention output back, over one
  NIC per compute GPU (bytes proportional to the batch, not the context);
- attention: the batch's KV read by the memory devices at their bandwidth times the calibrated efficiency.

Beside the stages, per layer a micro-batch waits out its two messages' latency (the query's trip to the memory
devices, the output's trip back; the instance's link's one-way latency each, `round_trip_s`): no device is busy
through it, so it lengthens a micro-batch's chain but not its busiest stage.

Rotational staggered pipelining (lamina 5.1.1) with m micro-batches on one model replica (the paper's n = 2: no
context migration) overlaps them. Per layer a micro-batch passes compute -> network -> attention, each device
kind serving the micro-batches in turn; with c, n, a one micro-batch's per-layer stage times and L layers the
step lasts, with r the layer's round trip and chain = c + n + a + r,

    T(m) = (L - 1) * max(m * max(c, n, a), chain) + chain + (m - 1) * max(c, n, a)

the steady period (the busiest device kind, or one micro-batch's own chain when that is longer) for all but the
last layer, whose micro-batches drain behind the first (a flow shop of identical jobs, the round trip a delay no
device serves). m = 1 is no overlap: L times the chain, every round trip waited out; with m > 1 the other
micro-batches' stages fill a micro-batch's round trip. A scheduler runs the pipeline only where it shortens the
step (lamina 6.1 enables it only for large batches), so a step is min(T(1), T(m)): never shorter than the slowest
of its stages as run (m micro-batches each loading the weights), never longer than the whole batch's three stages
and L round trips end to end.
"""
from dataclasses import dataclass
from functools import cache

from reference_impl.calibration.model import CalibratedPerfModel, Link
from reference_impl.calibration.perf_model import InstanceLoad, causal_prefill_pairs, step_time_s
from reference_impl.calibration.specs import model_spec
from reference_impl.systems.lamina.hardware import DTYPE_BYTES, kv_bytes_per_token

MAX_BATCH = 4096  # the largest batch priced or served (the paper's Fig 12 goes to 2048 requests and beyond)
MESSAGES_PER_LAYER = 2  # a layer's q, k, v out to the memory devices, its attention output back


def compute_s(model: CalibratedPerfModel, batch: int) -> float:
    """Every layer but attention, for `batch` decode requests on the compute devices (weights, all-reduces)."""
    return step_time_s(model, InstanceLoad(batch_size=batch, attn_kv_tokens=0))


@cache
def _layers_and_bytes_per_token_layer(model: str) -> tuple[int, int]:
    spec = model_spec(model)
    kv_dim = spec.num_kv_heads * spec.head_dim
    return spec.num_layers, (spec.hidden_size + 2 * kv_dim + spec.hidden_size) * DTYPE_BYTES


def network_bytes(model: str, batch: int) -> int:
    """Bytes a decode step of `batch` requests sends between the pools: q, k, v out, the output back, per layer."""
    num_layers, per_token_layer = _layers_and_bytes_per_token_layer(model)
    return num_layers * batch * per_token_layer


def network_s(model: str, batch: int, tp: int, nic_gb_s_per_gpu: float) -> float:
    return network_bytes(model, batch) / (tp * nic_gb_s_per_gpu * 1e9)


def round_trip_s(link: Link) -> float:
    """What a micro-batch waits on `link` per layer beyond bandwidth: its messages' one-way latency."""
    return MESSAGES_PER_LAYER * link.one_way_latency_s


def attention_s(model: str, kv_tokens: float, attention_bytes_per_s: float) -> float:
    """Decode attention over `kv_tokens` on memory devices reading KV at `attention_bytes_per_s` together."""
    return kv_tokens * kv_bytes_per_token(model) / attention_bytes_per_s


def prefill_s(model: CalibratedPerfModel, prompt_lens) -> float:
    """Whole prompts on the compute devices: the calibrated prefill, attention included (lamina 5.6)."""
    pairs = sum(causal_prefill_pairs(n) for n in prompt_lens)
    return step_time_s(model, InstanceLoad(batch_size=0, attn_kv_tokens=0, prefill_tokens=sum(prompt_lens),
                                           prefill_attn_pairs=pairs))


def kv_move_s(model: str, tokens: int, tp: int, nic_gb_s_per_gpu: float) -> float:
    """Prompt KV of `tokens` from the compute GPUs to the memory devices, over the compute GPUs' NICs."""
    return tokens * kv_bytes_per_token(model) / (tp * nic_gb_s_per_gpu * 1e9)


def pipelined_step_s(compute_s: float, network_s: float, attention_s: float, num_layers: int,
                     micro_batches: int, round_trip_s: float = 0.0) -> float:
    """T(m) of the module docstring; the stage times and the round trip are one micro-batch's, one layer's."""
    longest = max(compute_s, network_s, attention_s)
    chain = compute_s + network_s + attention_s + round_trip_s
    period = max(micro_batches * longest, chain)
    return (num_layers - 1) * period + chain + (micro_batches - 1) * longest


@dataclass(frozen=True, slots=True)
class DecodeStep:
    """One decode step: how long it lasts, how long each device kind is busy in it, the micro-batches it ran."""
    duration_s: float
    compute_busy_s: float
    network_busy_s: float
    memory_busy_s: float
    micro_batches: int


@dataclass(frozen=True, slots=True)
class StepPricer:
    """Prices decode steps of one Lamina instance: its compute devices' cost model (whose link reaches the memory
    devices: its latency is each message's), tp compute GPUs with a NIC of `nic_gb_s_per_gpu` each, memory devices
    reading KV at `attention_bytes_per_s` together, up to `micro_batches` micro-batches."""
    model: CalibratedPerfModel
    nic_gb_s_per_gpu: float
    attention_bytes_per_s: float
    micro_batches: int

    def decode(self, batch: int, kv_tokens: float) -> DecodeStep:
        """`batch` requests reading `kv_tokens` of KV: the shorter of no overlap and the pipeline."""
        m, name, layers = self.model, self.model.model, self.model.num_layers
        wait = round_trip_s(m.link)
        best = None
        for parts in sorted({1, max(1, min(self.micro_batches, batch))}):
            size = -(-batch // parts)  # the largest micro-batch sets each stage's pace
            c = compute_s(m, size) / layers
            n = network_s(name, size, m.tp, self.nic_gb_s_per_gpu) / layers
            a = attention_s(name, kv_tokens / parts, self.attention_bytes_per_s) / layers
            t = pipelined_step_s(c, n, a, layers, parts, wait)
            if best is None or t < best.duration_s:
                busy = parts * layers
                best = DecodeStep(t, busy * c, busy * n, busy * a, parts)
        return best
