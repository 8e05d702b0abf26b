"""`repro serve --backend ray`: each instance a Ray actor; the greedy tokens of a request that borrows are
generate()'s, a client that goes away mid-stream leaves no rBlock, table or move on any actor, and the engine keeps
no id of a request whose result was delivered (finished or aborted). One private
Ray for the case (started and shut down by the server); `xdist_group` keeps it off the other Ray tests' CPUs."""
import time

import httpx
import pytest

from reference_impl.backends.local import generate
from reference_impl.control.engine import EngineConfig

pytest.importorskip("ray")
pytestmark = [pytest.mark.xdist_group("ray"), pytest.mark.slow]
LONG = {"model": "tiny", "prompt": [(7 * i) % 500 + 2 for i in range(100)], "max_tokens": 150, "temperature": 0,
        "ignore_eos": True, "return_token_ids": True}
SHORT = {"model": "tiny", "prompt": [5, 6, 7], "max_tokens": 2, "temperature": 0}


def _kept_ids(driver) -> dict:
    engine = driver.engine
    return {name: len(getattr(engine, name)) for name in ("mirror", "home_of", "done", "failed")}


def test_ray_backend_serves_and_aborts(start_server, tiny_model):
    server = start_server(backend="ray", num_instances=2, blocks_per_instance=8, block_size=16)
    r = httpx.post(server.base_url + "/v1/completions", json=LONG, timeout=300).json()
    expected = generate(tiny_model, [LONG["prompt"]], 150, EngineConfig(block_size=16), ignore_eos=True)
    assert r["choices"][0]["token_ids"] == expected.token_ids[0]
    with httpx.Client(base_url=server.base_url, timeout=300) as client:
        with client.stream("POST", "/v1/completions", json=LONG | {"stream": True}) as stream:
            for n, _ in enumerate(stream.iter_lines()):
                if n == 10:
                    break  # leave mid-stream
    deadline = time.monotonic() + 30
    while True:
        stats = server.server.loop.stats()
        if (stats.num_live, stats.rblocks_used, stats.num_tables) == (0, 0, 0) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert (stats.num_live, stats.rblocks_used, stats.rblocks_reserved, stats.num_tables, stats.num_moves) == (0,) * 5
    aborted = [line for line in httpx.get(server.base_url + "/metrics").text.splitlines()
               if line.startswith("infinite_llm:requests_aborted_total{")]
    assert aborted[0].endswith(" 1.0")
    with httpx.Client(base_url=server.base_url, timeout=300) as client:
        for _ in range(12):
            assert client.post("/v1/completions", json=SHORT).json()["choices"][0]["finish_reason"] == "length"
    assert server.server.loop.call(_kept_ids).result(10) == dict.fromkeys(("mirror", "home_of", "done", "failed"), 0)


def test_ray_backend_serves_prefill_decode_disaggregation(start_server, tiny_model):
    """`repro serve --backend ray --system pd-disaggregation`: a request prefilled on instance 0, moved whole to
    instance 1 and decoded there gets generate()'s tokens; nothing is held after."""
    server = start_server(backend="ray", system="pd-disaggregation", num_instances=2, blocks_per_instance=8,
                          block_size=16)
    body = LONG | {"prompt": LONG["prompt"][:40], "max_tokens": 20}
    r = httpx.post(server.base_url + "/v1/completions", json=body, timeout=300).json()
    expected = generate(tiny_model, [body["prompt"]], 20, EngineConfig(block_size=16), ignore_eos=True)
    assert r["choices"][0]["token_ids"] == expected.token_ids[0]
    from reference_impl.backends.ray.serving import loop_stats

    moved = server.server.loop.call(lambda driver: {i: (s.num_requests_moved, s.num_adopted)
                                                    for i, s in loop_stats(driver.engine).items()}).result(10)
    assert moved == {0: (1, 0), 1: (0, 1)}
    stats = server.server.loop.stats()
    assert (stats.num_live, stats.rblocks_used, stats.num_tables) == (0, 0, 0)
