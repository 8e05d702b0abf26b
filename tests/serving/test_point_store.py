"""The store of finished points (repro/serving/store.py, keys.py, sweep.py): a key that moves with every input of a
point and with the simulator's code, entries that are not trusted when damaged, an interrupted run that resumes
with the same result, a rerun with one changed --param that runs only the points it changed, and two experiments
that share points computing them once."""
import dataclasses
import json
import shutil
import subprocess
import sys

import pytest

from repro.framework.base import RunParams
from repro.framework.registry import get_experiment
from repro.serving import keys
from repro.serving.store import PointStore
from repro.serving.sweep import Sweep
from repro.serving.executors import InProcess
from repro.serving.tasks import PointTask, RequestSpec
from reference_impl.sim.config import sim_engine
from reference_impl.systems.registry import cluster
from workloads import generate

SMALL = {"traces": "0", "seeds": "1", "short_requests": "40", "workers": "1"}


def _requests(rate_per_s, seed):
    return generate(trace_id=0, num_requests=30, rate_per_s=rate_per_s, seed=seed)


def _task(**changes):
    base = cluster("llama2-7b", "A100-80GB-SXM", 4, engine=sim_engine(seed=0))
    task = PointTask("infinite-llm", base, RequestSpec(_requests, 4.0, 0), 4.0, "t", 0, steady_only=True)
    return dataclasses.replace(task, **changes)


def _key(task):
    return keys.point_key(keys.point_fields(task, keys.requests_sha256(task.requests.build())))


def _without_wall_times(x):
    if isinstance(x, dict):
        return {k: _without_wall_times(v) for k, v in x.items() if k != "wall_s"}
    return [_without_wall_times(v) for v in x] if isinstance(x, list) else x


def _run(name, extra, lines=None):
    log = (lines.append if lines is not None else lambda line: None)
    return get_experiment(name).run(RunParams(quick=True, extra=dict(extra)), log)


def _counts(lines, name):
    (line,) = [x for x in lines if x.startswith(f"{name}: ") and " points run, " in x]
    words = line.split()
    return {"run": int(words[1]), "stored": int(words[4])}


def test_the_key_moves_with_every_input_of_a_point():
    task = _task()
    base = task.base
    variants = [_task(system="vllm-m"), _task(rate_per_s=4.5), _task(seed=1), _task(steady_only=False),
                _task(requests=RequestSpec(_requests, 4.0, 1)), _task(requests=RequestSpec(_requests, 4.0, 0, 0.5)),
                _task(base=dataclasses.replace(base, engine=dataclasses.replace(base.engine, max_batch_size=64))),
                _task(base=dataclasses.replace(base, link="0.125")),
                _task(runner=_prefill_runner())]
    got = [_key(v) for v in variants]
    assert len(set(got) | {_key(task)}) == len(variants) + 1
    assert _key(_task(label="another label")) == _key(task)  # the label is not an input


def _prefill_runner():
    from functools import partial

    from repro.experiments.sensitivity.experiment import point_with_prefill
    return partial(point_with_prefill, 1e14)


def test_the_key_moves_with_the_calibration_files_bytes(tmp_path):
    from reference_impl.calibration.coefficients import DEFAULT_PATH
    calibration = tmp_path / "calibration.json"
    shutil.copy(DEFAULT_PATH, calibration)
    task = _task()
    task = _task(base=dataclasses.replace(task.base, coefficients_path=str(calibration)))
    before = _key(task)
    calibration.write_text(calibration.read_text() + "\n")
    assert _key(task) != before


def test_runs_that_cannot_differ_share_a_key_and_unnamed_runners_are_never_stored():
    vllm = _task(system="vllm-m")  # no pooling: the link carries nothing (as_simulated)
    assert _key(vllm) == _key(dataclasses.replace(vllm, base=dataclasses.replace(vllm.base, link="0.125")))
    with pytest.raises(keys.Unkeyable):
        _key(_task(runner=lambda task: {}))


def test_the_code_version_covers_the_simulators_files_and_moves_with_them(tmp_path):
    for entry in ("reference_impl/sim", "workloads", "repro/serving", "reference_impl/backends/ray"):
        (tmp_path / entry).mkdir(parents=True)
    (tmp_path / "reference_impl/sim/simulator.py").write_text("STEP = 1\n")
    (tmp_path / "workloads/traces.json").write_text("{}\n")
    (tmp_path / "repro/serving/tasks.py").write_text("\n")
    (tmp_path / "reference_impl/backends/ray/loop.py").write_text("\n")
    before = keys.code_version(tmp_path)
    (tmp_path / "reference_impl/backends/ray/loop.py").write_text("# not simulated\n")
    assert keys.code_version(tmp_path) == before
    for path in ("reference_impl/sim/simulator.py", "workloads/traces.json", "repro/serving/tasks.py"):
        (tmp_path / path).write_text((tmp_path / path).read_text() + " ")
        assert keys.code_version(tmp_path) != before
        before = keys.code_version(tmp_path)


def test_a_simulation_imports_nothing_outside_the_code_version():
    """In a fresh process, every module a point loads from the simulator's packages is a file the code version
    hashes (what NOT_SIMULATED leaves out is never imported)."""
    script = (
        "import sys; from repro.serving.tasks import run_job\n"
        "from tests.serving.test_point_store import _task\n"
        "run_job((_task(), None))\n"
        "print('\\n'.join(m.__file__ for m in list(sys.modules.values()) if getattr(m, '__file__', None)))\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                         cwd=keys.ROOT).stdout.split()
    hashed = {str(p) for p in keys.simulated_files()}
    roots = [str(keys.ROOT / top) + "/" for top in ("reference_impl", "workloads")]
    loaded = [f for f in out if any(f.startswith(r) for r in roots)]
    assert loaded and not [f for f in loaded if f not in hashed]


def test_a_damaged_entry_is_recomputed_and_replaced(tmp_path):
    store = PointStore(tmp_path)
    task = _task()
    sweep = Sweep(InProcess(), store, lambda line: None)
    first = sweep.run(sweep.point(task))
    key = _key(task)
    assert store.get(key).point == first and store.get(key).cpu_s > 0 and sweep.counts["run"] == 1
    path = store.path(key)
    good = path.read_text()
    entry = json.loads(good)
    for damage in (good[: len(good) // 2], "", json.dumps({**entry, "key": "0" * 64}),
                   json.dumps({**entry, "point": {**entry["point"], "steady_output_tok_s": 1.0}})):
        path.write_text(damage)
        assert store.get(key) is None
        again = Sweep(InProcess(), store, lambda line: None)
        point = again.run(again.point(task))
        assert again.counts == {"run": 1, "stored": 0, "shared": 0}
        assert _without_wall_times(point) == _without_wall_times(first) and store.get(key).point == point
    assert not list(tmp_path.rglob("*.tmp"))  # every write went through a rename


def test_a_store_that_cannot_be_written_fails_the_run(tmp_path):
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    sweep = Sweep(InProcess(), PointStore(blocked), lambda line: None)
    with pytest.raises(Exception, match="a-file"):
        sweep.run(sweep.point(_task()))


class Interrupted(Exception):
    pass


def test_an_interrupted_run_resumes_with_the_same_result(tmp_path, monkeypatch):
    from repro.serving import tasks
    reference = _run("e2e", {**SMALL, "store": "off"})
    real, calls = tasks.run_point, []

    def dies_after_ten(*args, **kwargs):  # the run stops at its eleventh point (as a killed run would)
        calls.append(1)
        if len(calls) > 10:
            raise Interrupted
        return real(*args, **kwargs)

    monkeypatch.setattr(tasks, "run_point", dies_after_ten)
    with pytest.raises(Interrupted):
        _run("e2e", {**SMALL, "store": str(tmp_path)})
    monkeypatch.setattr(tasks, "run_point", real)
    assert len(list(tmp_path.rglob("*.json"))) == 10
    lines = []
    resumed = _run("e2e", {**SMALL, "store": str(tmp_path)}, lines)
    assert _counts(lines, "e2e")["stored"] == 10
    assert _without_wall_times(resumed) == _without_wall_times(reference)


def test_a_changed_param_runs_only_the_points_it_changes(tmp_path):
    store = {"store": str(tmp_path)}
    first = []
    _run("e2e", {**SMALL, **store}, first)
    lines = []
    _run("e2e", {**SMALL, **store, "link": "0.125"}, lines)  # vLLM-M sends nothing over the link
    points = [line for line in lines if " steady out tok/s " in line]
    assert points and all(("(from the store)" in line) == (" vllm-m " in line) for line in points)
    assert _counts(lines, "e2e")["stored"] == sum(" vllm-m " in line for line in points)


def test_simulations_that_are_not_serving_points_are_stored_as_jobs(tmp_path):
    """context-length's batches and dgfm's arms run as Sweep.job: a rerun reads every one from the store."""
    for name in ("context-length", "dgfm"):
        first, again = [], []
        fresh = _run(name, {"store": str(tmp_path)}, first)
        stored = _run(name, {"store": str(tmp_path)}, again)
        ran = _counts(first, name)["run"]
        assert ran > 0 and _counts(again, name) == {"run": 0, "stored": ran}
        assert stored == json.loads(json.dumps(fresh))  # what the store gives is what was run, through JSON


def test_experiments_that_share_points_compute_them_once(tmp_path):
    """sensitivity's default arm probes as e2e does: after e2e, its saturation probes come from the store."""
    same = {"traces": "0", "short_requests": "40"}
    _run("e2e", {**same, "seeds": "1", "store": str(tmp_path)})
    alone = _run("sensitivity", {**same, "inputs": "max_batch_size", "store": "off"})
    lines = []
    shared = _run("sensitivity", {**same, "inputs": "max_batch_size", "store": str(tmp_path)}, lines)
    assert _counts(lines, "sensitivity")["stored"] >= 4  # each system's probes up to past saturation
    assert _without_wall_times(shared) == _without_wall_times(alone)
    shutil.rmtree(tmp_path)
