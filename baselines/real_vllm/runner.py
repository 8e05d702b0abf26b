"""Runs real vLLM engines on a job file and writes what each request did; executed inside the vLLM environment.

    .venv-vllm/bin/python -m baselines.real_vllm.runner JOB.json OUT.json

JOB: {"engines": [EngineArgs kwargs, ...], "env": {...}, "blocks_per_engine", "block_size", "max_model_len",
      "ignore_eos": bool, "rounds": [[{"req_id", "arrival_s", "prompt_ids", "max_tokens"}, ...], ...]}
OUT: {"vllm_version", "startup_s", "rounds": [{"run_s", "requests": [{"req_id", "engine", "arrival_s",
      "first_token_s", "finish_s", "output_ids", "status"}, ...], "step_end_s": [...], "step_tokens": [...]}]}
Rounds run one after another on the same engines (started once); times are seconds from the start of the
round; the step lists give the tokens each engine step generated.
Requests arrive at their `arrival_s` on the wall clock; several engines go to the one with the most free KV
blocks (baselines.real_vllm.dispatch). Only the standard library, vLLM and that module are imported, and vLLM
spawns processes, so everything runs under `if __name__ == "__main__"`.
"""
import json
import os
import sys
import time

from baselines.real_vllm.dispatch import REJECTED, MostFreeDispatcher


def build_engines(job):
    from vllm import EngineArgs, LLMEngine

    return [LLMEngine.from_engine_args(EngineArgs(**kwargs)) for kwargs in job["engines"]]


def run(job, engines, requests: list[dict]) -> dict:
    from vllm import SamplingParams

    dispatcher = MostFreeDispatcher(len(engines), job["blocks_per_engine"], job["block_size"], job["max_model_len"])
    in_order = requests
    requests = sorted(requests, key=lambda r: (r["arrival_s"], r["req_id"]))
    records = {r["req_id"]: {"req_id": r["req_id"], "engine": None, "arrival_s": r["arrival_s"], "first_token_s": None,
                             "finish_s": None, "output_ids": [], "status": "unfinished"} for r in requests}
    prompt_lens = {str(r["req_id"]): len(r["prompt_ids"]) for r in requests}
    pending = list(reversed(requests))
    timeline = {"step_end_s": [], "step_tokens": []}  # per engine step that produced tokens
    t0 = time.perf_counter()
    while pending or any(e.has_unfinished_requests() for e in engines):
        now_s = time.perf_counter() - t0
        while pending and pending[-1]["arrival_s"] <= now_s:
            req = pending.pop()
            engine = dispatcher.choose(str(req["req_id"]), len(req["prompt_ids"]), req["max_tokens"])
            rec = records[req["req_id"]]
            if engine == REJECTED:
                rec["status"] = "rejected"
                continue
            rec["engine"] = engine
            params = SamplingParams(temperature=0.0, max_tokens=req["max_tokens"], ignore_eos=job["ignore_eos"],
                                    detokenize=False)
            engines[engine].add_request(str(req["req_id"]), {"prompt_token_ids": req["prompt_ids"]}, params)
        busy = [e for e in engines if e.has_unfinished_requests()]
        if not busy:
            time.sleep(max(0.0, pending[-1]["arrival_s"] - (time.perf_counter() - t0)))
            continue
        for engine in busy:
            outputs = engine.step()
            stamp_s = time.perf_counter() - t0
            new_tokens = 0
            for out in outputs:
                rec = records[int(out.request_id)]
                ids = list(out.outputs[0].token_ids) if out.outputs else []
                if ids and rec["first_token_s"] is None:
                    rec["first_token_s"] = stamp_s
                new_tokens += len(ids) - len(rec["output_ids"])
                rec["output_ids"] = ids
                dispatcher.on_tokens(out.request_id, prompt_lens[out.request_id] + len(ids))
                if out.finished:
                    rec["finish_s"] = stamp_s
                    rec["status"] = "finished"
                    dispatcher.on_finish(out.request_id)
            if new_tokens:
                timeline["step_end_s"].append(stamp_s)
                timeline["step_tokens"].append(new_tokens)
    return {"run_s": time.perf_counter() - t0, "requests": [records[r["req_id"]] for r in in_order], **timeline}


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m baselines.real_vllm.runner JOB.json OUT.json", file=sys.stderr)
        return 2
    with open(argv[0], encoding="utf-8") as f:
        job = json.load(f)
    os.environ.update(job.get("env", {}))
    import vllm

    t_start = time.perf_counter()
    engines = build_engines(job)
    startup_s = time.perf_counter() - t_start
    rounds = [run(job, engines, requests) for requests in job["rounds"]]
    result = {"vllm_version": vllm.__version__, "startup_s": startup_s, "rounds": rounds}
    tmp = argv[1] + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(result, f)
    os.replace(tmp, argv[1])
    for engine in engines:  # V1 engines own worker processes; stop them before the interpreter exits
        shutdown = getattr(getattr(engine, "engine_core", None), "shutdown", None)
        if shutdown is not None:
            shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
