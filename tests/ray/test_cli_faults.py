"""`repro generate --backend ray --json` while an instance actor is SIGKILLed mid-run, through the console entry
point: stdout stays one JSON document (Ray's message about the dead worker goes to stderr), every request carries
its status and reason, the requests that fit the survivors end with the local backend's tokens, and the exit
status says whether any request failed (3, docs/cli.md). A serving run that loses requests so raises and drops
its engine.

One private Ray for the module (as tests/ray/test_ray_backend.py); `xdist_group` keeps it off the other Ray tests' CPUs."""
import json
import os
import signal

import pytest

ray = pytest.importorskip("ray")

import reference_impl.backends.ray as ray_backend  # noqa: E402
from reference_impl.backends.ray import RayConfig  # noqa: E402
from repro.exit_codes import REQUESTS_FAILED  # noqa: E402

pytestmark = [pytest.mark.xdist_group("ray"), pytest.mark.usefixtures("local_ray")]

SHORT = [[1, 2, 3], [4, 5, 6, 7], [9, 9, 9], [10, 11], [3, 3, 3, 3, 3], [7]]
LONG = [list(range(1, 61)), list(range(2, 62))]  # 60 + 12 tokens: 9 rBlocks of 8, more than two instances of 4 hold
BLOCK_SIZE, NEW_TOKENS = 8, 12
ARGS = ["--model", "device-time:20ms", "--instances", "3", "--block-size", str(BLOCK_SIZE), "--max-new-tokens",
        str(NEW_TOKENS), "--ignore-eos", "--json"]





def generate_args(prompts, blocks_per_instance: int) -> list[str]:
    return ARGS + ["--blocks-per-instance", str(blocks_per_instance)] + \
        [a for p in prompts for a in ("--prompt-ids", ",".join(map(str, p)))]


def kill_once(engine, killed: list) -> None:
    """Once tokens flow: SIGKILL the process of the first request's instance (its pid from the actor itself)."""
    if killed or not any(s.output_ids for s in engine.mirror.values()):
        return
    actor = engine.actors[engine.home_of[min(engine.home_of)]]
    pid = ray.get(actor.__ray_call__.remote(lambda _self: os.getpid()))
    os.kill(pid, signal.SIGKILL)
    killed.append(pid)


@pytest.fixture
def kill_an_instance(monkeypatch):
    """The next Ray generation loses an instance once tokens flow; the pids killed."""
    killed = []
    generate = ray_backend.generate
    on_poll = lambda engine: kill_once(engine, killed)  # noqa: E731
    monkeypatch.setattr(ray_backend, "generate", lambda *a, **k: generate(*a, on_poll=on_poll, **k))
    return killed


@pytest.mark.parametrize("prompts, blocks_per_instance", [(SHORT, 16), (SHORT[:2] + LONG, 4)],
                         ids=["room-to-spare", "too-little-room"])
def test_an_instance_killed_mid_run_keeps_stdout_json_and_the_exit_status_honest(
        prompts, blocks_per_instance, kill_an_instance, repro_cli):
    argv = generate_args(prompts, blocks_per_instance)
    code, out, _ = repro_cli(["generate", *argv, "--backend", "local"])
    assert code == 0
    local = json.loads(out)
    assert [r["status"] for r in local["requests"]] == ["finished"] * len(prompts)

    code, out, err = repro_cli(["generate", *argv, "--backend", "ray"])
    assert kill_an_instance, "no instance was killed: the run ended before its first tokens"
    result = json.loads(out)  # nothing of Ray's on stdout
    statuses = [r["status"] for r in result["requests"]]
    assert len(statuses) == len(prompts) and set(statuses) <= {"finished", "failed"}
    for request, tokens, want in zip(result["requests"], result["token_ids"], local["token_ids"]):
        if request["status"] == "finished":
            assert request["reason"] is None and tokens == want
        else:
            assert "died" in request["reason"]
    # what two surviving instances cannot hold fails (the kill comes with the first tokens: none had finished)
    too_long = {i for i, p in enumerate(prompts) if len(p) + NEW_TOKENS > 2 * blocks_per_instance * BLOCK_SIZE}
    failed = {i for i, status in enumerate(statuses) if status == "failed"}
    assert failed <= too_long and bool(failed) == bool(too_long)
    assert code == (REQUESTS_FAILED if failed else 0)
    assert not failed or any(line.startswith("error: ") and "requests failed" in line for line in err.splitlines())


def test_an_experiment_whose_requests_failed_exits_3_with_one_line(monkeypatch, repro_cli):
    from reference_impl.errors import RequestsFailed

    def lose_requests(*_args, **_kwargs):
        raise RequestsFailed({2: "instance 0 died; it no longer fits"}, 4)

    monkeypatch.setattr("repro.results.run_and_save", lose_requests)
    code, out, err = repro_cli(["run", "--experiment", "e2e", "--backend", "ray", "--quick"])
    assert code == REQUESTS_FAILED and "wrote" not in out
    errors = [line for line in err.splitlines() if line.startswith("error: ")]  # Ray may add its own lines
    assert len(errors) == 1 and errors[0].startswith("error: 1 of 4 requests failed; request 2: instance 0 died")


def test_a_serving_run_that_lost_requests_raises_and_drops_its_engine(monkeypatch):
    from reference_impl.backends.ray.engine import RayEngine
    from reference_impl.backends.ray.serving import RayServer
    from reference_impl.control.engine import EngineConfig
    from reference_impl.errors import RequestsFailed
    from reference_impl.model.resolve import resolve_model
    from workloads.request import Request

    killed, collect = [], RayEngine.collect

    def collect_then_kill(engine, max_wait_s):
        finished = collect(engine, max_wait_s)
        kill_once(engine, killed)
        return finished

    monkeypatch.setattr(RayEngine, "collect", collect_then_kill)
    server = RayServer(resolve_model("device-time:20ms"), RayConfig())
    requests = [Request(i, 0.0, n, 12, "test") for i, n in enumerate([3, 4, 60, 60])]
    try:
        with pytest.raises(RequestsFailed) as failure:
            server.serve(requests, EngineConfig(3, 4, block_size=8))
        assert not server.engines  # an engine short of an instance serves no next workload
    finally:
        server.close()
    assert killed and failure.value.failed and all("died" in r for r in failure.value.failed.values())
    assert set(failure.value.failed) <= {2, 3}  # the long ones: the short ones fit the survivors
