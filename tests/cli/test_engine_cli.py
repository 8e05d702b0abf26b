"""`repro generate`: identical tokens with and without spreading; bad input is one line and exit 2."""
import json

import pytest

from repro.cli import main


def run_json(argv, capsys):
    main(["generate", *argv, "--json"])
    return json.loads(capsys.readouterr().out)


def run_failing(argv, capsys) -> str:
    with pytest.raises(SystemExit) as info:
        main(["generate", *argv])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err
    return err


def test_spreading_keeps_tokens(capsys):
    prompts = ["--prompt-ids", "5,6,7,8,9,10,11", "--prompt-ids", "400,3,3,1", "--prompt-ids", "42"]
    common = ["--max-new-tokens", "24", "--block-size", "4", *prompts]
    alone = run_json(["--instances", "1", "--blocks-per-instance", "64", *common], capsys)
    spread = run_json(["--instances", "4", "--blocks-per-instance", "5", *common], capsys)
    assert alone["token_ids"] == spread["token_ids"]
    assert [len(t) for t in alone["token_ids"]] == [24, 24, 24]
    assert all(len(p) == 1 for p in alone["placement"])
    assert any(len(p) > 1 for p in spread["placement"])  # some KV had to live on other instances
    for p, prompt_len in zip(spread["placement"], (7, 4, 1)):
        assert sum(w["num_blocks"] for w in p) == -(-(prompt_len + 23) // 4)


def test_chunked_prefill_keeps_tokens(capsys):
    common = ["--max-new-tokens", "6", "--block-size", "4", "--prompt-ids", ",".join(map(str, range(3, 40))),
              "--prompt-ids", "400,3,3,1", "--instances", "2", "--blocks-per-instance", "8"]
    whole = run_json(common, capsys)
    assert run_json([*common, "--chunked-prefill-tokens", "8"], capsys)["token_ids"] == whole["token_ids"]
    err = run_failing([*common, "--chunked-prefill-tokens", "3"], capsys)
    assert "chunked prefill needs at least one block" in err and len(err.splitlines()) == 1


def test_text_output_names_instances(capsys):
    main(["generate", "--prompt-len", "30", "--max-new-tokens", "3", "--block-size", "4", "--instances", "2",
          "--blocks-per-instance", "5"])
    out = capsys.readouterr().out
    assert "request 0:" in out and "instance 0:" in out and "instance 1:" in out


def test_unknown_model_folder(tmp_path, capsys):
    err = run_failing(["--model", str(tmp_path / "nope"), "--prompt-ids", "1"], capsys)
    assert err.startswith("error:") and "config.json" in err and len(err.splitlines()) == 1


def test_unsupported_config(tmp_path, capsys):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"]}))
    err = run_failing(["--model", str(tmp_path), "--prompt-ids", "1"], capsys)
    assert "unsupported model config" in err and len(err.splitlines()) == 1


def test_prompt_outside_vocabulary(capsys):
    err = run_failing(["--prompt-ids", "1,2,512"], capsys)
    assert "outside the vocabulary" in err and len(err.splitlines()) == 1


def test_budget_too_small(capsys):
    err = run_failing(["--prompt-ids", "1,2,3", "--max-new-tokens", "40", "--block-size", "4", "--instances", "2",
                       "--blocks-per-instance", "3"], capsys)
    assert "rBlocks" in err and len(err.splitlines()) == 1
    err = run_failing(["--prompt-ids", "1,2,3", "--max-new-tokens", "40", "--block-size", "4", "--instances", "4",
                       "--blocks-per-instance", "8", "--no-pooling"], capsys)
    assert "instance has 8" in err


def test_malformed_prompt_ids(capsys):
    err = run_failing(["--prompt-ids", "1,x"], capsys)
    assert "--prompt-ids" in err


def test_corrupt_weights(tmp_path, capsys):
    config = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 32, "hidden_size": 16,
              "intermediate_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2}
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "model.safetensors").write_bytes(b"not a safetensors file")
    err = run_failing(["--model", str(tmp_path), "--prompt-ids", "1"], capsys)
    assert err.startswith("error: cannot read") and len(err.splitlines()) == 1


def test_text_prompts_go_through_the_model_folders_tokenizer(capsys):
    from reference_impl.model.resolve import model_folder
    from reference_impl.model.tokenizer import load_tokenizer
    tok = load_tokenizer(model_folder("tiny"))
    texts = ["Hello there", "The cat sat"]
    got = run_json([*(a for t in texts for a in ("--prompt", t)), "--max-new-tokens", "4"], capsys)
    ids = run_json([*(a for t in texts for a in ("--prompt-ids", ",".join(map(str, tok.encode(t))))),
                    "--max-new-tokens", "4"], capsys)
    assert got["token_ids"] == ids["token_ids"] and "text" not in ids
    assert got["text"] == [tok.decode(t) for t in got["token_ids"]]
    assert got["wall_s"] > 0 and got["output_tok_s"] == pytest.approx(8 / got["wall_s"])


def test_sampling_options(capsys):
    common = ["--prompt-ids", "5,6,7,8", "--prompt-ids", "400,3", "--max-new-tokens", "5"]
    greedy = run_json(common, capsys)["token_ids"]
    # top-p below the largest probability keeps only the most probable token: greedy again
    assert run_json([*common, "--temperature", "1.5", "--top-p", "1e-9"], capsys)["token_ids"] == greedy
    sampled = run_json([*common, "--temperature", "2", "--sampling-seed", "1"], capsys)["token_ids"]
    assert sampled != greedy
    alone = run_json(["--prompt-ids", "400,3", "--max-new-tokens", "5", "--temperature", "2", "--sampling-seed", "1"],
                     capsys)["token_ids"]
    assert alone == sampled[1:]  # a seeded request's draws do not depend on its batch


@pytest.mark.parametrize("argv, expected", [
    (["--prompt-ids", "1", "--backend", "ray", "--temperature", "1"], "--backend ray decodes greedily"),
    (["--prompt", "hi", "--model", "device-time:5ms"], "--prompt needs a tokenizer"),
    (["--prompt", "hi", "--prompt-ids", "1"], "give one of --prompt"),
    (["--prompt-ids", "1", "--gpus-per-instance", "1"], "--gpus-per-instance is for --backend ray"),
    (["--prompt-ids", "1", "--top-p", "0"], "--top-p"),
])
def test_bad_generation_options_are_one_line(capsys, argv, expected):
    err = run_failing(argv, capsys)
    assert expected in err and len(err.splitlines()) == 1


def test_cuda_without_a_device_is_one_line(capsys):
    import torch
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is here")
    err = run_failing(["--prompt-ids", "1", "--device", "cuda"], capsys)
    assert "no CUDA device" in err and len(err.splitlines()) == 1


@pytest.mark.gpu
def test_cuda_gives_the_cpus_greedy_tokens(capsys):
    common = ["--prompt", "Hello there", "--prompt-ids", "5,6,7,8", "--max-new-tokens", "12", "--instances", "2",
              "--blocks-per-instance", "2", "--block-size", "4"]
    cpu = run_json(common, capsys)
    gpu = run_json([*common, "--device", "cuda"], capsys)
    assert gpu["token_ids"] == cpu["token_ids"] and gpu["text"] == cpu["text"]
