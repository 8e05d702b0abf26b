"""The figure set in one process (`repro figures`, `make figures`): every experiment whose points run on a sweep
(Experiment.on_sweep) on ONE sweep (one executor, store, bar and key table: a point two experiments share runs
once, independent groups of all of them interleave), then the others here, then every figure and one report.

    paths = run_set(FIGURE_SET, SetOptions(quick=True), log)

A result that exists is kept unless `force` (the simulated and arithmetic ones: their points come from the store)
or `remeasure` (those measured on this machine: --backend local)."""
import hashlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

from reference_impl.atomic import write_json_atomic
from repro.framework.base import RunParams
from repro.framework.registry import get_experiment
from repro.results import PlannedRun, load_results, plan_run, save_run
from repro.serving.sweep import open_sweep
from repro.serving.task_graph import as_experiment

DRAWN = ".drawn"  # under the figures folder: what each experiment's figures were drawn from
# (experiment, backend), as `make figures` ran them one by one
FIGURE_SET = (("motivation", "sim"), ("perf-model", "sim"), ("context-length", "sim"), ("e2e", "sim"),
              ("sensitivity", "sim"), ("e2e-datasets", "sim"), ("dgfm", "sim"), ("migration", "sim"),
              ("lamina", "sim"), ("designs", "sim"), ("scale", "sim"), ("attention-micro", "local"),
              ("kv-move", "local"), ("remote-vs-local", "local"))


@dataclass(frozen=True, slots=True)
class SetOptions:
    quick: bool = False
    seed: int = 0
    address: str | None = None
    sweep: dict = field(default_factory=dict)  # the sweep's own --param keys (workers, store, graph)
    each: dict = field(default_factory=dict)  # experiment -> its --param pairs
    results_dir: str = "results"
    force: bool = False
    remeasure: bool = False


def plan_set(members, options: SetOptions, log) -> list[PlannedRun]:
    """The runs of `members` to do (a kept result is skipped, as repro run skips it)."""
    planned = []
    for name, backend in members:
        exp = get_experiment(name)
        params = RunParams(quick=options.quick, backend=backend, seed=options.seed,
                           address=options.address if exp.on_sweep else None, extra=dict(options.each.get(name, {})))
        local = backend == "local"
        _, run = plan_run(exp, params, options.results_dir, force=options.remeasure if local else options.force,
                          log=log, again="--remeasure" if local else "--force")
        if run is not None:
            planned.append(run)
    return planned


def run_set(members, options: SetOptions, log) -> list:
    """Run what plan_set finds to do: the swept experiments together, then the rest one by one; each result saved
    as soon as it is done. Returns the paths written."""
    planned = plan_set(members, options, log)
    swept = [run for run in planned if run.exp.on_sweep is not None]
    written = []
    if swept:
        sweep_params = RunParams(quick=options.quick, address=options.address, extra=dict(options.sweep))
        with open_sweep(sweep_params, log, "+".join(run.exp.name for run in swept)) as sweep:
            written += sweep.run(sweep.gather(*(as_experiment(run.exp.name, _swept(run, log, sweep))
                                                for run in swept)))
    for run in planned:
        if run.exp.on_sweep is None:
            start = time.perf_counter()
            data = run.exp.run(run.params, log)
            written.append(save_run(run, data, time.perf_counter() - start))
    return written


async def _swept(run: PlannedRun, log, sweep):
    start = time.perf_counter()
    data = await run.exp.on_sweep(run.params, log, sweep)
    return save_run(run, data, time.perf_counter() - start)


def plot_set(members, results_dir: str, figures_dir: str, log, *, replot: bool = False) -> list[str]:
    """Every figure of `members` that has results, drawn in this process; an experiment whose results' data are
    those its figures were last drawn from (a stamp in figures_dir/.drawn/) and whose files exist is kept unless
    `replot`. Returns the files drawn."""
    drawn = []
    for name in dict.fromkeys(name for name, _ in members):
        exp = get_experiment(name)
        results = load_results(results_dir, exp)
        if exp.plot is None or not results:
            continue
        stamp = Path(figures_dir) / DRAWN / f"{name}.json"
        data_sha256 = hashlib.sha256(json.dumps([r["data"] for r in results], sort_keys=True).encode()).hexdigest()
        if not replot and _same_drawing(stamp, data_sha256):
            log(f"{name}: figures drawn from these results already (--replot draws them again)")
            continue
        files = exp.plot(results, figures_dir)
        write_json_atomic(stamp, {"data_sha256": data_sha256, "files": files})
        drawn += files
    return drawn


def _same_drawing(stamp: Path, data_sha256: str) -> bool:
    try:
        last = json.loads(stamp.read_text())
        return last["data_sha256"] == data_sha256 and all(Path(f).exists() for f in last["files"])
    except (OSError, ValueError, KeyError, TypeError):
        return False
