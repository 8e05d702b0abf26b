"""CalibratedPerfModel: infinite-llm Eq. 5 with every term taken from a calibration file (what hardware profiles and
datasheets give; what a particular engine implementation costs beyond that is engine_costs.EngineCosts).

    layer time = W(b)/f(b)        measured non-attention time of one layer at b tokens (TP shard)
               + 2 all-reduces    of b * hidden activations when tp > 1 (after attention and after the MLP)
               + KV bytes / g     attention: KV tokens read x KV bytes per token per GPU / achieved read rate
               + prefill pairs    causal prefill attention FLOPs / achieved prefill attention FLOP rate
               + remote MA        queries out and (out, lse) back on the link between the instances
               + PP send/recv     (pp - 1) activation transfers per step, spread over the layers
               + step overhead    what the engine spends per step beyond these terms (scheduling, LM head,
                                  sampling, Python), spread over the layers, where `repro profile` measured it
"""
from dataclasses import dataclass, field

from reference_impl.calibration import coefficients
from reference_impl.calibration.curve import Curve
from reference_impl.calibration.memory import MemoryModel
from reference_impl.calibration.overhead import StepOverhead
from reference_impl.calibration.specs import model_spec, reserve_fraction
from reference_impl.errors import InputError
from reference_impl.calibration.links import DEFAULT_LINK, INTER_NODE, INTRA_NODE, link_gb_s
from reference_impl.calibration.perf_model import InstanceLoad

MEMO_TOKENS = 4096  # layer_time_s keeps tokens_s of steps up to this many tokens (decode batches, short prompts)
LSE_BYTES = 4  # float32 log-sum-exp per head


@dataclass(frozen=True, slots=True)
class Link:
    """Time of one message between two GPUs: a measured curve, or latency + bytes / bandwidth."""

    name: str
    curve: Curve | None = None
    latency_s: float = 0.0
    bytes_per_s: float = 0.0

    def time_s(self, num_bytes: float) -> float:
        if num_bytes <= 0:
            return 0.0
        if self.curve is not None:
            return self.curve(num_bytes)
        return self.latency_s + num_bytes / self.bytes_per_s

    @property
    def one_way_latency_s(self) -> float:
        """A message's time before its bytes count: the measured curve's floor (its smallest message), or the
        latency a bandwidth link was given."""
        return self.curve.ys[0] if self.curve is not None else self.latency_s


def resolve_link(hardware: dict, link, where: str) -> Link:
    """`link`: a measured send/recv name of the calibration ("intra-node", "inter-node"), a Link, or a
    bandwidth in GB/s (a number or numeric string), which keeps the measured inter-node latency."""
    if isinstance(link, Link):
        return link
    measured = hardware["send_recv_s"]
    if isinstance(link, str) and link in measured:
        return Link(link, curve=Curve.from_json(measured[link]))
    try:
        gb_s = link_gb_s(link)
    except InputError as exc:
        raise InputError(f"{exc} for {where}: choose one of {', '.join(sorted(measured))} "
                         "or a bandwidth in GB/s > 0") from None
    floor = measured.get(INTER_NODE, {}).get("y", [0.0])[0]
    return Link(f"{gb_s:g} GB/s", latency_s=floor, bytes_per_s=gb_s * 1e9)


def _hardware(doc: dict, gpu: str, where: str) -> dict:
    if gpu not in doc["hardware"]:
        raise InputError(f"no calibration for GPU {gpu!r} in {where}: available {', '.join(sorted(doc['hardware']))}")
    return doc["hardware"][gpu]


@dataclass(frozen=True, slots=True)
class CalibratedPerfModel:
    """Implements reference_impl.calibration.perf_model.PerfModel for one instance (tp x pp GPUs)."""

    num_layers: int
    model: str
    gpu: str
    tp: int
    pp: int
    memory: MemoryModel
    non_attention: Curve
    all_reduce: Curve | None
    link: Link
    pp_link: Link
    activation_bytes_per_token: float
    kv_read_s_per_token: float  # one layer, this GPU's KV heads
    prefill_attn_s_per_pair: float
    query_bytes: float
    result_bytes: float
    step_overhead: StepOverhead | None = None  # measured by `repro profile` on the machine at hand only
    # token count -> tokens_s(count) up to MEMO_TOKENS (the simulator prices millions of steps of a few batch sizes)
    _tokens_s: dict = field(default_factory=dict, init=False, compare=False, repr=False)  # (replace: a fresh one)

    @classmethod
    def for_setting(cls, *, model: str, gpu: str, tp: int = 1, pp: int = 1, link=None,
                    pp_link=None, coefficients_path=None) -> "CalibratedPerfModel":
        """`link`: where remote MicroAttention queries and KV moves travel (see `resolve_link`); default
        inter-node where the calibration has it (with 8 GPUs a node, most instance pairs of a 32-GPU
        cluster are in different nodes), else intra-node. `pp_link` defaults to intra-node when the
        instance fits in one node, else inter-node."""
        spec = model_spec(model)
        spec.check_parallelism(tp, pp)
        doc = coefficients.load(coefficients_path)
        where = str(coefficients_path or coefficients.DEFAULT_PATH)
        hw = _hardware(doc, gpu, where)
        per_tp = hw["non_attention_s"].get(model)
        if per_tp is None:
            raise InputError(f"{where} has no non-attention profile of {model} on {gpu}: "
                             f"profiled {', '.join(sorted(hw['non_attention_s']))}")
        if str(tp) not in per_tp:
            raise InputError(f"{where} has no profile of {model} at tp={tp} on {gpu}: profiled tp "
                             f"{', '.join(sorted(per_tp, key=int))}")
        all_reduce = None
        if tp > 1:
            if str(tp) not in hw["all_reduce_s"]:
                raise InputError(f"{where} has no all-reduce profile for {tp} GPUs on {gpu}")
            all_reduce = Curve.from_json(hw["all_reduce_s"][str(tp)])
        if link is None:
            link = DEFAULT_LINK if DEFAULT_LINK in hw["send_recv_s"] else INTRA_NODE
        if pp_link is None:
            pp_link = INTRA_NODE if tp * pp <= hw.get("gpus_per_node", 1) else INTER_NODE
        dtype = hw["dtype_bytes"]
        memory = MemoryModel.for_setting(spec, tp=tp, pp=pp, dtype_bytes=dtype, mem_bytes=hw["mem_bytes"],
                                         reserve_fraction=reserve_fraction())
        memory.check_fits(f"{model} with tp={tp} pp={pp} on {gpu}")
        attention = hw["attention"]
        prefill_rate = attention.get("prefill_attn_flops_per_s")
        kv_per_layer = 2 * spec.kv_heads_per_gpu(tp) * spec.head_dim * dtype
        overhead = hw.get("step_overhead_s", {}).get(model)
        query = spec.hidden_size // tp * dtype
        return cls(
            num_layers=spec.num_layers, model=model, gpu=gpu, tp=tp, pp=pp, memory=memory,
            non_attention=Curve.from_json(per_tp[str(tp)]), all_reduce=all_reduce,
            link=resolve_link(hw, link, where), pp_link=resolve_link(hw, pp_link, where),
            activation_bytes_per_token=spec.hidden_size * dtype,
            kv_read_s_per_token=kv_per_layer / attention["kv_read_bytes_per_s"],
            prefill_attn_s_per_pair=(4 * spec.hidden_size / tp / prefill_rate) if prefill_rate else 0.0,
            query_bytes=query, result_bytes=query + spec.num_heads // tp * LSE_BYTES,
            step_overhead=StepOverhead.from_json(overhead) if overhead else None)

    def tokens_s(self, tokens: int) -> float:
        """One layer's time for `tokens` apart from attention: non-attention, TP all-reduce, PP hand-off."""
        t = self.non_attention(tokens)
        if self.all_reduce is not None:
            t += 2.0 * self.all_reduce(tokens * self.activation_bytes_per_token)
        if self.pp > 1:
            t += (self.pp - 1) * self.pp_link.time_s(tokens * self.activation_bytes_per_token) / self.num_layers
        return t

    def layer_time_s(self, load: InstanceLoad) -> float:
        tokens = load.batch_size + load.prefill_tokens
        t = 0.0
        if tokens:
            t = self._tokens_s.get(tokens)
            if t is None:
                t = self.tokens_s(tokens)
                if tokens <= MEMO_TOKENS:
                    self._tokens_s[tokens] = t
        t += load.attn_kv_tokens * self.kv_read_s_per_token
        if load.prefill_attn_pairs:
            t += load.prefill_attn_pairs * self.prefill_attn_s_per_pair
        n = load.num_remote_queries
        if n:
            t += self.link.time_s(n * self.query_bytes) + self.link.time_s(n * self.result_bytes)
        if self.step_overhead is not None:
            t += self.step_overhead.step_s(load) / self.num_layers
        return t

    def kv_transfer_s(self, num_tokens: int) -> float:
        """Moving `num_tokens` of KV (all layers) to another instance over `link`, GPU shards in parallel."""
        return self.link.time_s(num_tokens * self.memory.kv_bytes_per_token_per_gpu)
