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
