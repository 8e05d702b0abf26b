"""perf-model (infinite-llm Fig 7): debtor, creditor and aggregate throughput against rBlocks moved.

LLaMA2-7B on two one-A100 instances. The creditor decodes CREDITOR_BATCH requests of SHORT_LEN tokens; the
debtor decodes one long request and has a queue of SHORT_LEN-token requests it admits as memory frees. The
paper's debtor holds a 1000K context, which cannot fit two 80 GB A100s with LLaMA2-7B (about 112K tokens of
KV per GPU here), so the long request is the largest that fits the debtor (`--param long_len=N` to change).
For each k, k of the long request's blocks move to the creditor, then:
- model: Algorithm 1's own objective (Eq. 5-7 on the gManager's views, with projected admissions);
- simulated: the engine's scheduler admits what fits, and the sim backend times DECODE_STEPS decode steps.
"""
from functools import partial

import pandas as pd

from reference_impl.control.algorithm1 import after_move, instance_tps
from reference_impl.errors import InputError
from reference_impl.calibration.links import DEFAULT_LINK
from reference_impl.control.sequence import Sequence, num_blocks_for
from reference_impl.serving.records import RequestRecord
from reference_impl.sim.backend import SimBackend, build_engine
from reference_impl.sim.config import SimConfig, blocks_per_instance, sim_engine
from reference_impl.sim.events import PromptIds
from repro.framework.base import ClaimRow, Experiment, default_run_id
from repro.framework.figures import main_result, new_figure, save, sns
from repro.framework.params import LINK_HELP, Param, link, positive_int
from repro.serving.sweep import run_in_sweep, sweep_params
from repro.serving.tasks import typed

SHORT_LEN = 500
CREDITOR_BATCH = 64
NUM_QUEUED = 300
WARMUP_STEPS = 3
DECODE_STEPS = 8  # 500 + 3 + 8 tokens stay inside 4 blocks of 128: no request needs a new block
NEVER = 10**9  # output length: nobody finishes during the measurement
PARAMS = (Param("link", link, DEFAULT_LINK, LINK_HELP),
          Param("long_len", positive_int, None, "tokens of the debtor's long request (default: what fills the "
                                                "instance but room for 4 short requests)"),
          *sweep_params())


def build(config: SimConfig, long_len: int):
    records = {}
    backend = SimBackend(config, records)
    engine = build_engine(config, backend)
    debtor, creditor = engine.instances
    seqs = [(debtor, Sequence(0, PromptIds(long_len), NEVER))]
    seqs += [(creditor, Sequence(1 + i, PromptIds(SHORT_LEN), NEVER)) for i in range(CREDITOR_BATCH)]
    seqs += [(debtor, Sequence(10_000 + i, PromptIds(SHORT_LEN), NEVER)) for i in range(NUM_QUEUED)]
    for inst, seq in seqs:
        records[seq.req_id] = RequestRecord(seq.req_id, 0.0, len(seq.prompt_ids), NEVER)
        inst.scheduler.add(seq)
    return engine, backend


def measure(config: SimConfig, long_len: int, k: int) -> dict:
    """Simulated decode throughput of debtor and creditor after k blocks of the long request moved."""
    engine, backend = build(config, long_len)
    debtor, creditor = engine.instances
    debtor.scheduler.schedule()  # admit the long request (and what else fits) before moving
    creditor.scheduler.schedule()
    for inst in (debtor, creditor):
        inst.scheduler.running.sort(key=lambda s: s.req_id)
    moved = k and debtor.rm.move_kvcache(0, k, creditor.inst_id)
    while debtor.rm.moves:
        debtor.rm.advance_moves(backend.copy_blocks, k)
    for inst in (debtor, creditor):  # the moved KV's transfer is not part of the steps measured
        backend.pending[inst.inst_id].sent_tokens = 0
    out = {"k": k, "moved": bool(moved) or k == 0}
    for name, inst in (("debtor", debtor), ("creditor", creditor)):
        tokens, time_s = 0, 0.0
        for step in range(WARMUP_STEPS + DECODE_STEPS):
            n_before = len(inst.scheduler.running)
            outcome = backend.step(inst)
            if step >= WARMUP_STEPS and outcome.ran:
                tokens += n_before
                time_s += outcome.duration_s
        out[f"{name}_tok_s"] = tokens / time_s if time_s else 0.0
        out[f"{name}_batch"] = len(inst.scheduler.running)
    out["aggregate_tok_s"] = out["debtor_tok_s"] + out["creditor_tok_s"]
    return out


def model_curve(config: SimConfig, long_len: int, ks) -> list[dict]:
    """Algorithm 1's objective for each k, on the gManager's views of the state before any move."""
    engine, backend = build(config, long_len)
    for inst in engine.instances:
        inst.scheduler.schedule()
    engine.heartbeats()
    views = engine.gmanager.views()
    debtor, creditor = views[0], views[1]
    rows = []
    for k in ks:
        d, c = after_move(debtor, creditor, 0, k)
        model, bs = engine.gmanager.perf_model, config.engine.block_size
        rows.append({"k": k, "debtor_tok_s": instance_tps(model, d, bs), "creditor_tok_s": instance_tps(model, c, bs)})
        rows[-1]["aggregate_tok_s"] = rows[-1]["debtor_tok_s"] + rows[-1]["creditor_tok_s"]
    return rows


def run(params, log) -> dict:
    return run_in_sweep(typed("perf-model", PARAMS, params), log, "perf-model", on_sweep)


async def on_sweep(params, log, sweep) -> dict:
    """The model's curve and each k's simulated steps, a job of the sweep each."""
    params = typed("perf-model", PARAMS, params)
    link = params.extra["link"]
    config = SimConfig(model="llama2-7b", tp=1, link=link, engine=sim_engine(num_instances=2, seed=params.seed))
    capacity, bs = blocks_per_instance(config), config.engine.block_size
    long_blocks = capacity - 4 * num_blocks_for(SHORT_LEN, bs)  # room for a few short ones
    long_len = params.extra.get("long_len") or long_blocks * bs
    if long_len > long_blocks * bs:
        raise InputError(f"--param long_len={long_len} does not fit the debtor beside 4 short requests: at most "
                         f"{long_blocks * bs} tokens on one {config.gpu}")
    k_max = min(num_blocks_for(long_len, bs),
                capacity - CREDITOR_BATCH * num_blocks_for(SHORT_LEN + WARMUP_STEPS + DECODE_STEPS, bs))
    ks = sorted(set(range(0, k_max + 1, max(1, k_max // (8 if params.quick else 40)))) | {k_max})
    model, *measured = await sweep.gather(
        sweep.job(partial(model_curve, config, long_len, ks), "perf-model modelled"),
        *(sweep.job(partial(measure, config, long_len, k), f"perf-model k={k}") for k in ks))
    for row, simulated in zip(model, measured):
        log(f"k={row['k']:4d}  model {row['aggregate_tok_s']:8.1f}  simulated {simulated['aggregate_tok_s']:8.1f} tok/s")
    return {"model": "llama2-7b", "gpu": config.gpu, "link": link, "block_size": bs,
            "long_len": long_len, "short_len": SHORT_LEN, "creditor_batch": CREDITOR_BATCH,
            "modelled": model, "simulated": measured}


def claims(results) -> list[ClaimRow]:
    data = main_result(results)["data"]
    sim = data["simulated"]
    base = sim[0]["aggregate_tok_s"]
    peak = max(sim, key=lambda r: r["aggregate_tok_s"])
    gain = peak["aggregate_tok_s"] / base if base else None
    err = max(abs(m["aggregate_tok_s"] - s["aggregate_tok_s"]) / s["aggregate_tok_s"]
              for m, s in zip(data["modelled"], sim) if s["aggregate_tok_s"])
    note = (f"debtor context {data['long_len']} tokens (1000K does not fit 2 A100s); peak at k={peak['k']} blocks "
            f"of {data['block_size']} tokens; model vs simulated max error {err:.1%}")
    return [ClaimRow("perf-model-2inst", "aggregate tput gain at the best k (paper ~8800/6500)", "~1.35x",
                     None, None, gain, "x", note)]


def plot(results, figures_dir) -> list[str]:
    data = main_result(results)["data"]
    frames = []
    for source in ("modelled", "simulated"):
        for row in data[source]:
            for role in ("debtor", "creditor", "aggregate"):
                frames.append({"k": row["k"], "tok_s": row[f"{role}_tok_s"], "role": role, "source": source})
    fig, (ax,) = new_figure(1, 5.5, 3.6)
    sns.lineplot(pd.DataFrame(frames), x="k", y="tok_s", hue="role", style="source", ax=ax)
    ax.set_xlabel(f"rBlocks moved ({data['block_size']} tokens each)")
    ax.set_ylabel("decode tokens/s")
    ax.set_title(f"LLaMA2-7B, 2 A100 instances, debtor context {data['long_len'] // 1000}K", fontsize=9)
    return save(fig, figures_dir, "infinite-llm-fig7")


EXPERIMENT = Experiment("perf-model", ("infinite-llm Fig 7",), "perf_model.schema.json", run, default_run_id,
                        plot=plot, claims=claims, params=PARAMS, on_sweep=on_sweep)
